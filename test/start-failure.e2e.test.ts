import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runServiceProcess } from './service-process.ts';

describe('a start that fails once the configuration holds', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('is one pino line at fatal with the message, credentials masked, then exit 1', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    // Nothing listens on port 9 (discard): the bus never becomes usable within the short timeout.
    const r = runServiceProcess({
      DATA_DIR: dir,
      BUS: 'nats',
      NATS_URL: 'nats://u:SECRETPW2@127.0.0.1:9',
      NATS_STARTUP_TIMEOUT_MS: '300',
    });
    expect(await r.exit).toBe(1);
    const fatal = r.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.msg).toMatch(
      /^failed to start: NATS at nats:\/\/u:\*\*\*@127\.0\.0\.1:9 not usable within 300 ms/,
    );
    // The line says what to do, not only what failed.
    expect(fatal[0]!.msg).toContain(
      'Start nats-server with JetStream (-js) or correct NATS_URL; NATS_STARTUP_TIMEOUT_MS sets how long a start waits for it',
    );
    expect((fatal[0]!.err as { stack: string }).stack).toContain('connectNatsBus');
    expect(r.stderr).not.toContain('failed to start');
    expect(JSON.stringify(r.lines) + r.stderr).not.toContain('SECRETPW2');
  }, 60_000);

  it("states the cause once: the logged error's message does not repeat the cause its text already names", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    // Nothing listens on port 9: the first connection is refused.
    const r = runServiceProcess({
      DATA_DIR: dir,
      EVENT_STORE: 'postgres',
      POSTGRES_URL: 'postgres://signal:SECRETPW3@127.0.0.1:9/signals',
    });
    expect(await r.exit).toBe(1);
    const fatal = r.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    const cause = 'connect ECONNREFUSED 127.0.0.1:9';
    expect(fatal[0]!.msg).toContain(`is unreachable: ${cause}.`);
    const { message } = fatal[0]!.err as { message: string };
    // pino's serializer appended the cause's message to one that already ended its sentence with it.
    expect(message.split(cause)).toHaveLength(2);
    expect(message).toBe((fatal[0]!.msg as string).slice('failed to start: '.length));
    // A refused server is the line alone: no stack of ours, nor the driver's beneath it.
    expect(fatal[0]!.err).not.toHaveProperty('stack');
    expect(JSON.stringify(r.lines) + r.stderr).not.toContain('SECRETPW3');
  }, 60_000);
});
