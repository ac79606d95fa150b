import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { holdWriteLock } from '../../test/lmdb-lock-holder.ts';
import { watchAppends } from './append-watch.ts';
import { openLmdbEventStore } from './lmdb.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function lmdb() {
  const dir = await mkdtemp(join(tmpdir(), 'append-watch-'));
  dirs.push(dir);
  return openLmdbEventStore({ path: dir });
}

describe('watchAppends over a real LMDB store', () => {
  it('counts an append while it is on its way and forgets it once written', async () => {
    const { store, watch } = watchAppends(await lmdb());
    const appending = store.append('s-1', [{ type: 'Tick', data: { n: 1 } }]);
    expect(watch.pending).toBe(1);
    expect(watch.oldestPendingMs(Date.now() + 10_000)).toBeGreaterThanOrEqual(10_000);
    expect((await appending).position).toBe(1);
    expect(watch.pending).toBe(0);
    expect(watch.oldestPendingMs()).toBe(0);
    await store.close();
  });

  it('counts a snapshot save stuck on a write lock held by another process, as an append, until the lock is freed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'append-watch-'));
    dirs.push(dir);
    const inner = await openLmdbEventStore({ path: dir });
    const { watch, watchSnapshots } = watchAppends(inner);
    const snapshots = watchSnapshots(inner.projectionStore());
    const holder = await holdWriteLock(dir);
    try {
      // The engine saving its band scales when a stopped writer took the lock: it appends nothing
      // after, so a save the watch did not count left /readyz at 200 while writes had stopped.
      const saving = snapshots.save('band-scales:test', { version: 1, checkpoint: 0, state: { n: 1 } });
      expect(watch.pending).toBe(1);
      expect(watch.oldestPendingMs(Date.now() + 10_000)).toBeGreaterThanOrEqual(10_000);
      await holder.release();
      await saving;
      expect(watch.pending).toBe(0);
      expect((await snapshots.load('band-scales:test'))?.state).toEqual({ n: 1 });
      const removing = snapshots.delete('band-scales:test');
      expect(watch.pending).toBe(1);
      await removing;
      expect(watch.pending).toBe(0);
    } finally {
      await holder.release();
      await inner.close();
    }
  });

  it('forgets an append that fails (the store closed under it), and the error reaches the caller', async () => {
    const { store, watch } = watchAppends(await lmdb());
    await store.close();
    await expect(store.append('s-1', [{ type: 'Tick', data: {} }])).rejects.toThrow();
    expect(watch.pending).toBe(0);
  });

  it('leaves everything but append to the store itself, the adapter-specific parts included', async () => {
    const inner = await lmdb();
    const { store } = watchAppends(inner);
    expect(store.kind).toBe('lmdb');
    // The history slice reads LMDB's environment off the concrete adapter.
    expect(store.root).toBe(inner.root);
    await store.append('s-1', [{ type: 'Tick', data: {} }]);
    expect(await store.headPosition()).toBe(1);
    expect(await inner.streamRevision('s-1')).toBe(0);
    expect(store.readAll).toBe(store.readAll);
    await store.close();
  });
});
