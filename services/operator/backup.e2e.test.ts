import { execFile } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { newEvent } from '../../contracts/events.ts';
import { runServiceProcess, type ServiceProcess } from '../../test/service-process.ts';

const run = promisify(execFile);
const ROOT = new URL('../..', import.meta.url).pathname;
const root = mkdtempSync(join(tmpdir(), 'backup-e2e-'));
const running: ServiceProcess[] = [];

afterAll(async () => {
  for (const r of running) {
    if (r.child.exitCode === null) {
      r.child.kill('SIGTERM');
      await r.exit;
    }
  }
  rmSync(root, { recursive: true, force: true });
});

/** `npm run backup -- DEST` as npm runs it (node with tsx's loader), on `dataDir`. */
async function backup(
  dataDir: string,
  dest: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', 'services/operator/backup.ts', dest],
      { cwd: ROOT, env: { PATH: process.env.PATH, DATA_DIR: dataDir } },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** The service on `dataDir`, once it answers ready; its URL. */
async function startService(dataDir: string): Promise<{ run: ServiceProcess; url: string }> {
  const r = runServiceProcess({ DATA_DIR: dataDir, REPLAY_SPEED: '3000' });
  running.push(r);
  await expect
    .poll(() => r.lines.find((l) => l.msg === 'service started') ?? r.child.exitCode, { interval: 100 })
    .toBeTruthy();
  const url = r.lines.find((l) => l.msg === 'service started')?.url as string;
  expect(url, r.stderr).toBeDefined();
  await expect
    .poll(async () => (await fetch(`${url}/readyz`)).status, { interval: 200, timeout: 90_000 })
    .toBe(200);
  return { run: r, url };
}

async function stop(r: ServiceProcess): Promise<void> {
  r.child.kill('SIGTERM');
  expect(await r.exit).toBe(0);
}

/** What identifies an event and its content (a verdict's hash is in its data). */
const shape = (e: RecordedEvent) => ({
  position: e.position,
  id: e.id,
  type: e.type,
  stream: e.stream,
  revision: e.revision,
  recordedAt: e.recordedAt,
  data: e.data,
});

describe('npm run backup', () => {
  it('copies a running service’s log under appends; restored, the service starts on it with the log as it was at the backup point', async () => {
    const dataDir = join(root, 'live');
    const service = await startService(dataDir);
    // The replay's scheduled verdicts are being recorded: wait for some.
    const path = join(dataDir, 'events');
    const writer = await openLmdbEventStore({ path });
    await expect
      .poll(async () => writer.headPosition(), { interval: 200, timeout: 90_000 })
      .toBeGreaterThan(50);

    // A second writer appends all the while the backup runs (LMDB serializes the two processes).
    let appending = true;
    let appended = 0;
    const appender = (async () => {
      while (appending) {
        await writer.append(`backup-note-${appended % 7}`, [
          newEvent('ApiKeyRevoked', { keyId: `k-${appended}`, reason: 'under backup' }),
        ]);
        appended++;
      }
    })();
    const dest = join(root, 'backups', 'one');
    mkdirSync(dest, { recursive: true });
    const done = await backup(dataDir, dest);
    appending = false;
    await appender;
    expect(done.code, done.stderr).toBe(0);
    const report = JSON.parse(done.stdout) as {
      events: { head: number; headEventId: string; bytes: number; sourceBytes: number };
    };
    // Appends ran on and the service kept recording after the backup point.
    await writer.append('backup-note-after', [
      newEvent('ApiKeyRevoked', { keyId: 'after', reason: 'after' }),
    ]);
    const liveHead = await writer.headPosition();
    expect(report.events.head).toBeGreaterThan(50);
    expect(liveHead).toBeGreaterThan(report.events.head);
    expect(appended).toBeGreaterThan(0);
    expect(readdirSync(join(dest, 'events'))).toEqual(['data.mdb']);
    expect(report.events.bytes).toBeLessThanOrEqual(report.events.sourceBytes);

    // A non-empty destination is refused, and left as it was.
    const again = await backup(dataDir, dest);
    expect(again.code).toBe(2);
    // One line, not the usage text after it: the command was typed right.
    expect(again.stderr).toBe(`${dest} is not empty: a backup goes to a new or empty directory\n`);
    const file = join(root, 'backups', 'file');
    writeFileSync(file, 'x');
    expect((await backup(dataDir, file)).stderr).toContain('exists and is not a directory');

    // The log as it was, read while the service still runs, up to the backup point.
    const before = (await writer.readAll({ maxCount: report.events.head })).map(shape);
    await writer.close();
    await stop(service.run);

    // Restore into a new DATA_DIR, start on it.
    const restored = join(root, 'restored');
    mkdirSync(join(restored, 'events'), { recursive: true });
    copyFileSync(join(dest, 'events', 'data.mdb'), join(restored, 'events', 'data.mdb'));
    const again2 = await startService(restored);
    const reader = await openLmdbEventStore({ path: join(restored, 'events') });
    try {
      const after = (await reader.readAll({ maxCount: report.events.head })).map(shape);
      expect(after).toHaveLength(report.events.head);
      expect(after.at(-1)!.id).toBe(report.events.headEventId);
      expect(after).toEqual(before);
      // Verdicts (their hashes and chain links) among them, as recorded.
      expect(after.filter((e) => e.type === 'VerdictRecorded').length).toBeGreaterThan(0);
      expect(await reader.headPosition()).toBeGreaterThanOrEqual(report.events.head);
    } finally {
      await reader.close();
    }
    expect(existsSync(join(dest, 'events', 'lock.mdb'))).toBe(false);
    await stop(again2.run);
  }, 240_000);

  it('refuses an option it does not take by its name, exit 2, with where the usage is', async () => {
    const refused = await backup(join(root, 'no-data'), '--bogus');
    expect(refused.code).toBe(2);
    expect(refused.stderr.split('\n')).toEqual([
      'backup does not take --bogus',
      expect.stringMatching(/^for the usage: .* --help$/),
      '',
    ]);
  });
});
