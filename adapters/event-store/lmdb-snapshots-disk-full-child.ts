/**
 * For lmdb-snapshots-disk-full.int.test.ts: a process holding only an LMDB projection store (beside a
 * remote event store, no LmdbEventStore in it) saves snapshots until its disk is full. Prints one
 * JSON line: how the refused save failed and what a load returned afterwards. A stray rejection
 * from the failed commit would end this process before it prints (exit code 1).
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as turn } from 'node:timers/promises';
import { LmdbProjectionStore } from './lmdb-snapshots.ts';

const dir = process.argv[2]!;
const store = LmdbProjectionStore.open(join(dir, 'snapshots'));
await store.save('p', { version: 1, checkpoint: 1, state: { n: 1 } });

// Fill the disk to the last byte.
const fd = openSync(join(dir, 'filler'), 'a');
const chunk = Buffer.alloc(64 * 1024, 1);
for (let size = chunk.length; size >= 1; ) {
  try {
    writeSync(fd, chunk, 0, size);
  } catch {
    size = Math.floor(size / 2);
  }
}
closeSync(fd);

let refused: { name: string; code?: string; retryable?: boolean } | null = null;
for (let i = 2; i < 200 && refused === null; i++) {
  try {
    await store.save('p', { version: 1, checkpoint: i, state: { n: i, pad: 'x'.repeat(64 * 1024) } });
  } catch (err) {
    const e = err as { name: string; code?: string; retryable?: boolean };
    refused = { name: e.name, code: e.code, retryable: e.retryable };
  }
}
// Give a stray rejection of the failed commit every chance to surface.
for (let i = 0; i < 20; i++) await turn();
const loaded = await store.load<{ n: number }>('p');
process.stdout.write(`${JSON.stringify({ refused, loaded: loaded?.checkpoint ?? null })}\n`);
for (let i = 0; i < 20; i++) await turn();
process.exit(0);
