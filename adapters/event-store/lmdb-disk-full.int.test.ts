import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewEvent } from '../../contracts/envelope.ts';
import { newEvent } from '../../contracts/events.ts';
import { mountSmallDisk } from '../../test/disk-full.ts';
import { type LmdbEventStore, openLmdbEventStore } from './lmdb.ts';
import { EventStoreUnavailableError, StorageFullError } from './port.ts';

const disk = mountSmallDisk(4);
if (typeof disk === 'string' && process.env.CI !== 'true') {
  console.warn(`\n*** ${disk}: LMDB disk-full suite NOT RUN ***\n`);
}

const event = (i: number) =>
  newEvent('SubscriptionReEnabled', { subscriptionId: `wh_${i}_${'x'.repeat(1_500)}`.slice(0, 1_500) });
/**
 * An event whose data has a shape of its own (a field named after `i`): its write stores a new
 * msgpack shared structure at key 0 of the log in the same transaction, which a full disk rolls back.
 */
const shaped = (i: number): NewEvent => ({
  type: 'ShapeTried',
  data: { [`field${i}`]: i, pad: 'y'.repeat(1_500) },
});

describe.runIf(typeof disk !== 'string' || process.env.CI === 'true')('LMDB on a disk that fills up', () => {
  let store: LmdbEventStore;
  const acknowledged: number[] = [];
  /** The shape of the last append refused: its structure was minted in a transaction that failed. */
  let refusedShape = -1;

  beforeAll(async () => {
    if (typeof disk === 'string') throw new Error(disk);
    store = await openLmdbEventStore({ path: join(disk.dir, 'events') });
  });
  afterAll(async () => {
    await store?.close();
    if (typeof disk !== 'string') disk.unmount();
  });

  it('a write on a full disk is refused as retryable StorageFullError; health says so; reads go on', async () => {
    if (typeof disk === 'string') return;
    for (let i = 0; i < 50; i++) acknowledged.push((await store.append(`s-${i % 5}`, [event(i)])).position);
    disk.fill();
    let refused: unknown = null;
    // LMDB may still find free pages for a write or two before it needs the disk. Each append has
    // a new shape, so the one refused is of a shape no committed transaction stored.
    for (let i = 50; i < 2_000 && refused === null; i++) {
      try {
        acknowledged.push((await store.append(`s-${i % 5}`, [shaped(i)])).position);
      } catch (err) {
        refused = err;
        refusedShape = i;
      }
    }
    expect(refused).toBeInstanceOf(StorageFullError);
    expect(refused).toBeInstanceOf(EventStoreUnavailableError);
    expect(refused).toMatchObject({ statusCode: 503, code: 'storage_full', retryable: true });

    const health = await store.health();
    expect(health.ok).toBe(false);
    expect(health.detail).toMatch(/out of space since .*writes refused/);
    await expect(store.append('s-more', [event(-1)])).rejects.toThrow(StorageFullError);

    const all = await store.readAll();
    expect(all.map((e) => e.position)).toEqual(acknowledged);
    expect((await store.readStream('s-0')).length).toBeGreaterThan(0);
  });

  it('when space returns, health recovers without a write and writes are accepted again; nothing acknowledged is lost', async () => {
    if (typeof disk === 'string') return;
    disk.free();
    expect(await store.health()).toMatchObject({ ok: true });
    acknowledged.push((await store.append('s-after', [event(9_999)])).position);
    // The refused shape again, then a shape never seen: each must be stored with a structure that
    // is on disk, not one left in memory by the refused write (it read back as another shape).
    acknowledged.push((await store.append('s-after', [shaped(refusedShape)])).position);
    acknowledged.push((await store.append('s-after', [shaped(9_999)])).position);
    const all = await store.readAll();
    expect(all.map((e) => e.position)).toEqual(acknowledged);
    expect(new Set(all.map((e) => e.id)).size).toBe(all.length);
    // What a restart reads: every event decodes from what is on disk alone, as it was written.
    await store.close();
    store = await openLmdbEventStore({ path: join((disk as { dir: string }).dir, 'events') });
    const reread = await store.readAll();
    expect(reread).toEqual(all);
    expect(reread.at(-2)?.data).toEqual(shaped(refusedShape).data);
    expect(reread.at(-1)?.data).toEqual(shaped(9_999).data);
  });
});
