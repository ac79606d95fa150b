import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runServiceProcess } from '../../test/service-process.ts';
import { event, uniqueStream } from './contract.ts';
import { openLmdbEventStore } from './lmdb.ts';

const root = mkdtempSync(join(tmpdir(), 'lmdb-read-ahead-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/**
 * The VmFlags of every mapping of `file` in the process: `rr` is MADV_RANDOM, which is what
 * MDB_NORDAHEAD asks of the kernel (no read-ahead on a fault).
 */
function mappingFlags(pid: number | 'self', file: string): string[][] {
  const out: string[][] = [];
  let inFile = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.endsWith(` ${file}`);
    else if (inFile && line.startsWith('VmFlags:')) out.push(line.slice(8).trim().split(/\s+/));
  }
  return out;
}

async function writeAndRead(readAhead: boolean | undefined, dir: string): Promise<string[][]> {
  const store = await openLmdbEventStore({ path: dir, ...(readAhead === undefined ? {} : { readAhead }) });
  try {
    for (let i = 0; i < 20; i++) await store.append(uniqueStream('ra'), [event('PlainText', { i })]);
    expect((await store.readAll()).length).toBe(20);
    return mappingFlags('self', join(dir, 'data.mdb'));
  } finally {
    await store.close();
  }
}

describe('LMDB read-ahead (LMDB_READ_AHEAD)', () => {
  it('readAhead false maps data.mdb with MADV_RANDOM', async () => {
    const maps = await writeAndRead(false, join(root, 'off'));
    expect(maps.length).toBeGreaterThan(0);
    for (const flags of maps) expect(flags).toContain('rr');
  });

  it('by default the file is read with the kernel read-ahead (lmdb-js chunks, no advice)', async () => {
    const maps = await writeAndRead(undefined, join(root, 'default'));
    expect(maps.length).toBeGreaterThan(0);
    for (const flags of maps) expect(flags).not.toContain('rr');
  });

  it('the service passes LMDB_READ_AHEAD=false to its event store', async () => {
    const dataDir = join(root, 'service');
    const service = runServiceProcess({ DATA_DIR: dataDir, LMDB_READ_AHEAD: 'false', REPLAY_SPEED: '0' });
    try {
      const deadline = Date.now() + 60_000;
      while (!service.lines.some((l) => l.msg === 'event store: LMDB')) {
        if (service.child.exitCode !== null) throw new Error(`service exited: ${service.stderr}`);
        if (Date.now() > deadline) throw new Error('no event store opened in 60 s');
        await new Promise((r) => setTimeout(r, 50));
      }
      const maps = mappingFlags(service.child.pid!, join(dataDir, 'events', 'data.mdb'));
      expect(maps.length).toBeGreaterThan(0);
      for (const flags of maps) expect(flags).toContain('rr');
    } finally {
      service.child.kill('SIGTERM');
      await service.exit;
    }
  }, 90_000);
});
