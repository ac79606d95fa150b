import { afterEach, describe, expect, it } from 'vitest';
import { type Cache, CacheUnavailableError, CounterStateLostError, type QuotaWindow } from './port.ts';

/**
 * The cache contract: every adapter runs this same suite, so the in-process cache and Redis
 * cannot drift apart in semantics.
 */
export interface CacheContractHarness {
  /** A fresh cache sharing no keys with any cache opened before. */
  open(): Promise<Cache>;
  /** Two instances sharing one keyspace, as two replicas would; absent where state is per process. */
  openReplicas?(): Promise<[Cache, Cache]>;
}

const HOUR = 3_600_000;

function sleepUntil(unixMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, unixMs - Date.now())));
}

export function describeCacheContract(name: string, harness: CacheContractHarness): void {
  describe(`cache contract: ${name}`, () => {
    const opened: Cache[] = [];
    const open = async (): Promise<Cache> => {
      const cache = await harness.open();
      opened.push(cache);
      return cache;
    };

    afterEach(async () => {
      await Promise.all(opened.splice(0).map((cache) => cache.close()));
    });

    const windows = (limits: number[], expiresAt = Date.now() + HOUR): QuotaWindow[] =>
      limits.map((limit, i) => ({ key: `quota:w${i}`, limit, expiresAt }));

    describe('get / set / setIfAbsent / delete', () => {
      it('get of a missing key is null; set then get returns the value; set overwrites', async () => {
        const cache = await open();
        expect(await cache.get('k')).toBeNull();
        await cache.set('k', 'one');
        expect(await cache.get('k')).toBe('one');
        await cache.set('k', 'two ünïcødé');
        expect(await cache.get('k')).toBe('two ünïcødé');
        await cache.set('empty', '');
        expect(await cache.get('empty')).toBe('');
      });

      it('a value set with a TTL is gone once the TTL has passed; a plain set clears the TTL', async () => {
        const cache = await open();
        await cache.set('short', 'v', { ttlMs: 150 });
        await cache.set('kept', 'v', { ttlMs: 150 });
        await cache.set('kept', 'w');
        await cache.set('long', 'v', { ttlMs: HOUR });
        // The TTLs started no later than now, whatever delayed the calls above.
        await sleepUntil(Date.now() + 200);
        expect(await cache.get('short')).toBeNull();
        expect(await cache.get('kept')).toBe('w');
        expect(await cache.get('long')).toBe('v');
      });

      it('setIfAbsent sets only the first time and leaves the value alone afterwards', async () => {
        const cache = await open();
        expect(await cache.setIfAbsent('nonce', 'first')).toBe(true);
        expect(await cache.setIfAbsent('nonce', 'second')).toBe(false);
        expect(await cache.get('nonce')).toBe('first');
        await cache.set('present', 'x');
        expect(await cache.setIfAbsent('present', 'y', { ttlMs: HOUR })).toBe(false);
        expect(await cache.get('present')).toBe('x');
      });

      it('setIfAbsent succeeds again once the earlier value has expired', async () => {
        const cache = await open();
        expect(await cache.setIfAbsent('lease', 'a', { ttlMs: 150 })).toBe(true);
        await sleepUntil(Date.now() + 200);
        expect(await cache.setIfAbsent('lease', 'b', { ttlMs: HOUR })).toBe(true);
        expect(await cache.get('lease')).toBe('b');
      });

      it('concurrent setIfAbsent calls: exactly one wins', async () => {
        const cache = await open();
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) => cache.setIfAbsent('race', `v${i}`, { ttlMs: HOUR })),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
        expect(await cache.get('race')).toBe(`v${results.indexOf(true)}`);
      });

      it('delete removes a key, and deleting a missing key is not an error', async () => {
        const cache = await open();
        await cache.set('k', 'v');
        await cache.delete('k');
        expect(await cache.get('k')).toBeNull();
        await cache.delete('never-set');
        expect(await cache.setIfAbsent('k', 'again')).toBe(true);
      });

      it('rejects bad TTLs and empty keys before touching anything', async () => {
        const cache = await open();
        for (const ttlMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
          await expect(cache.set('k', 'v', { ttlMs })).rejects.toThrow(RangeError);
          await expect(cache.setIfAbsent('k', 'v', { ttlMs })).rejects.toThrow(RangeError);
        }
        await expect(cache.get('')).rejects.toThrow(RangeError);
        await expect(cache.set('', 'v')).rejects.toThrow(RangeError);
        expect(await cache.get('k')).toBeNull();
      });

      it('keys are isolated between caches opened separately', async () => {
        const a = await open();
        const b = await open();
        await a.set('shared-name', 'a');
        expect(await b.get('shared-name')).toBeNull();
      });
    });

    describe('releaseWindows', () => {
      it('gives units back to existing counters, never below zero, and creates none', async () => {
        const cache = await open();
        const ws = windows([5, 5]);
        await cache.debitWindows(ws, 3);
        const keys = ws.map((w) => w.key);
        expect(await cache.releaseWindows(keys, 1)).toEqual([2, 2]);
        expect(await cache.releaseWindows(keys, 5)).toEqual([0, 0]);
        expect(await cache.releaseWindows(['never-debited'], 1)).toEqual([0]);
        expect(await cache.readWindows([...keys, 'never-debited'])).toEqual([0, 0, 0]);
        expect(await cache.debitWindows(ws, 5)).toMatchObject({ ok: true, counts: [5, 5] });
        await expect(cache.releaseWindows(keys, -1)).rejects.toThrow(RangeError);
      });
    });

    describe('debitWindows', () => {
      it('debits every window when all have room and reports the counts after', async () => {
        const cache = await open();
        const ws = windows([3, 10]);
        expect(await cache.debitWindows(ws, 1)).toEqual({ ok: true, counts: [1, 1], refusedBy: null });
        expect(await cache.debitWindows(ws, 2)).toEqual({ ok: true, counts: [3, 3], refusedBy: null });
        expect(await cache.readWindows(ws.map((w) => w.key))).toEqual([3, 3]);
      });

      it('refuses when any window lacks room, names the first such window, and changes nothing', async () => {
        const cache = await open();
        const ws = windows([10, 2, 1]);
        await cache.setWindows([
          { key: ws[0]!.key, count: 4, expiresAt: ws[0]!.expiresAt },
          { key: ws[1]!.key, count: 2, expiresAt: ws[1]!.expiresAt },
        ]);
        expect(await cache.debitWindows(ws, 1)).toEqual({ ok: false, counts: [4, 2, 0], refusedBy: 1 });
        expect(await cache.readWindows(ws.map((w) => w.key))).toEqual([4, 2, 0]);
        // The last window alone would also refuse an amount of 2; the first refusing one is named.
        expect(await cache.debitWindows([ws[0]!, ws[2]!], 2)).toEqual({
          ok: false,
          counts: [4, 0],
          refusedBy: 1,
        });
        expect(await cache.readWindows(ws.map((w) => w.key))).toEqual([4, 2, 0]);
      });

      it('an amount that would overshoot the limit is refused even when the window is not full', async () => {
        const cache = await open();
        const ws = windows([5]);
        await cache.debitWindows(ws, 4);
        expect(await cache.debitWindows(ws, 2)).toEqual({ ok: false, counts: [4], refusedBy: 0 });
        expect(await cache.debitWindows(ws, 1)).toEqual({ ok: true, counts: [5], refusedBy: null });
        expect(await cache.debitWindows(ws, 1)).toEqual({ ok: false, counts: [5], refusedBy: 0 });
      });

      it('a zero limit refuses everything; an amount of 0 only reads', async () => {
        const cache = await open();
        expect(await cache.debitWindows(windows([0]), 1)).toEqual({ ok: false, counts: [0], refusedBy: 0 });
        const ws = windows([5]);
        await cache.debitWindows(ws, 2);
        expect(await cache.debitWindows(ws, 0)).toEqual({ ok: true, counts: [2], refusedBy: null });
        expect(await cache.readWindows([ws[0]!.key])).toEqual([2]);
      });

      it('no windows is a successful no-op', async () => {
        const cache = await open();
        expect(await cache.debitWindows([], 1)).toEqual({ ok: true, counts: [], refusedBy: null });
      });

      it('a counter disappears at its expiresAt while a longer window keeps its count', async () => {
        const cache = await open();
        const expiresAt = Date.now() + 200;
        const short: QuotaWindow = { key: 'quota:minute', limit: 2, expiresAt };
        const long: QuotaWindow = { key: 'quota:day', limit: 100, expiresAt: Date.now() + HOUR };
        await cache.debitWindows([short, long], 2);
        await sleepUntil(expiresAt + 50);
        expect(await cache.readWindows([short.key, long.key])).toEqual([0, 2]);
        const next = { ...short, expiresAt: Date.now() + HOUR };
        expect(await cache.debitWindows([next, long], 2)).toEqual({
          ok: true,
          counts: [2, 4],
          refusedBy: null,
        });
      });

      it('a window whose expiresAt has already passed does not keep its count', async () => {
        const cache = await open();
        const past: QuotaWindow = { key: 'quota:past', limit: 5, expiresAt: Date.now() - 1_000 };
        expect(await cache.debitWindows([past], 1)).toEqual({ ok: true, counts: [1], refusedBy: null });
        expect(await cache.readWindows([past.key])).toEqual([0]);
      });

      it('rejects bad arguments before touching any counter', async () => {
        const cache = await open();
        const ws = windows([5, 5]);
        for (const amount of [-1, 0.5, Number.NaN]) {
          await expect(cache.debitWindows(ws, amount)).rejects.toThrow(RangeError);
        }
        await expect(cache.debitWindows([ws[0]!, { ...ws[1]!, key: ws[0]!.key }], 1)).rejects.toThrow(
          /twice/,
        );
        await expect(cache.debitWindows([{ ...ws[0]!, limit: -1 }], 1)).rejects.toThrow(RangeError);
        await expect(cache.debitWindows([{ ...ws[0]!, expiresAt: 0 }], 1)).rejects.toThrow(RangeError);
        await expect(cache.debitWindows([{ ...ws[0]!, expiresAt: 1.5 }], 1)).rejects.toThrow(RangeError);
        await expect(cache.debitWindows([{ ...ws[0]!, key: '' }], 1)).rejects.toThrow(RangeError);
        expect(await cache.readWindows(ws.map((w) => w.key))).toEqual([0, 0]);
      });

      it('a key holding something other than a counter is an error, and nothing is debited', async () => {
        const cache = await open();
        const ws = windows([5, 5]);
        await cache.set(ws[1]!.key, 'not-a-number');
        await expect(cache.debitWindows(ws, 1)).rejects.toThrow(TypeError);
        await expect(cache.readWindows([ws[1]!.key])).rejects.toThrow(/not a quota counter/);
        expect(await cache.readWindows([ws[0]!.key])).toEqual([0]);
      });

      it('200 concurrent debits of 1 against windows with 5 left: exactly 5 succeed', async () => {
        const cache = await open();
        const ws = windows([1_000, 10]);
        await cache.setWindows(
          ws.map((w, i) => ({ key: w.key, count: i === 1 ? 5 : 0, expiresAt: w.expiresAt })),
        );
        const results = await Promise.all(Array.from({ length: 200 }, () => cache.debitWindows(ws, 1)));
        const granted = results.filter((r) => r.ok);
        expect(granted).toHaveLength(5);
        expect(granted.map((r) => r.counts[1]).sort((x, y) => x! - y!)).toEqual([6, 7, 8, 9, 10]);
        expect(results.filter((r) => !r.ok).every((r) => r.refusedBy === 1)).toBe(true);
        expect(await cache.readWindows(ws.map((w) => w.key))).toEqual([5, 10]);
      });
    });

    describe('readWindows / setWindows', () => {
      it('setWindows sets counters outright, overwriting earlier ones; readWindows reads them in order', async () => {
        const cache = await open();
        const expiresAt = Date.now() + HOUR;
        await cache.debitWindows([{ key: 'quota:a', limit: 100, expiresAt }], 40);
        await cache.setWindows([
          { key: 'quota:a', count: 7, expiresAt },
          { key: 'quota:b', count: 0, expiresAt },
          { key: 'quota:c', count: 123_456, expiresAt },
        ]);
        expect(await cache.readWindows(['quota:c', 'quota:missing', 'quota:a', 'quota:b'])).toEqual([
          123_456, 0, 7, 0,
        ]);
        expect(await cache.readWindows([])).toEqual([]);
        await cache.setWindows([]);
        expect(await cache.debitWindows([{ key: 'quota:a', limit: 8, expiresAt }], 1)).toEqual({
          ok: true,
          counts: [8],
          refusedBy: null,
        });
      });

      it('a rebuilt window expires at the given expiresAt', async () => {
        const cache = await open();
        const expiresAt = Date.now() + 200;
        await cache.setWindows([
          { key: 'quota:soon', count: 3, expiresAt },
          { key: 'quota:later', count: 4, expiresAt: Date.now() + HOUR },
        ]);
        await sleepUntil(expiresAt + 50);
        expect(await cache.readWindows(['quota:soon', 'quota:later'])).toEqual([0, 4]);
      });

      it('rejects bad counts, expiries and duplicate keys, writing none of the batch', async () => {
        const cache = await open();
        const expiresAt = Date.now() + HOUR;
        const good = { key: 'quota:good', count: 1, expiresAt };
        await expect(cache.setWindows([good, { key: 'quota:bad', count: -1, expiresAt }])).rejects.toThrow(
          RangeError,
        );
        await expect(cache.setWindows([good, { key: 'quota:bad', count: 1.5, expiresAt }])).rejects.toThrow(
          RangeError,
        );
        await expect(cache.setWindows([good, { key: 'quota:bad', count: 1, expiresAt: -5 }])).rejects.toThrow(
          RangeError,
        );
        await expect(cache.setWindows([good, good])).rejects.toThrow(/twice/);
        expect(await cache.readWindows(['quota:good'])).toEqual([0]);
      });
    });

    describe('generations of counters', () => {
      it('with no live generation, debitLive and readLive refuse with CounterStateLostError', async () => {
        const cache = await open();
        expect(await cache.liveGeneration('quota')).toBeNull();
        await expect(cache.debitLive('quota', windows([5]), 1)).rejects.toThrow(CounterStateLostError);
        await expect(cache.readLive('quota', ['quota:w0'])).rejects.toThrow(CounterStateLostError);
        const error = await cache.readLive('quota', []).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(CacheUnavailableError);
      });

      it('a filled generation goes live by compare-and-set; debits land on the live one only', async () => {
        const cache = await open();
        const ws = windows([10, 100]);
        const keys = ws.map((w) => w.key);
        await cache.beginGeneration('g1');
        await cache.addToGeneration(
          'g1',
          ws.map((w) => ({ key: w.key, count: 3, expiresAt: w.expiresAt })),
        );
        await cache.addToGeneration('g1', [{ key: ws[0]!.key, count: 2, expiresAt: ws[0]!.expiresAt }]);
        expect(await cache.switchGeneration('quota', 'other', { id: 'g1', position: 7 })).toBe(false);
        expect(await cache.switchGeneration('quota', null, { id: 'g1', position: 7 })).toBe(true);
        expect(await cache.liveGeneration('quota')).toEqual({ id: 'g1', position: 7 });
        expect(await cache.readLive('quota', keys)).toEqual([5, 3]);
        expect(await cache.debitLive('quota', ws, 5)).toEqual({
          ok: true,
          counts: [10, 8],
          refusedBy: null,
          generation: 'g1',
        });
        expect(await cache.debitLive('quota', ws, 1)).toEqual({
          ok: false,
          counts: [10, 8],
          refusedBy: 0,
          generation: 'g1',
        });
        expect(await cache.generationDebits('g1')).toBe(5);
        // Plain window operations do not see generation counters.
        expect(await cache.readWindows(keys)).toEqual([0, 0]);

        await cache.beginGeneration('g2');
        expect(await cache.switchGeneration('quota', null, { id: 'g2', position: 9 })).toBe(false);
        expect(await cache.switchGeneration('quota', 'g1', { id: 'g2', position: 9 })).toBe(true);
        // The build mark goes with the switch: the same generation cannot go live twice.
        expect(await cache.switchGeneration('quota', 'g2', { id: 'g2', position: 9 })).toBe(false);
        expect(await cache.readLive('quota', keys)).toEqual([0, 0]);
        expect((await cache.debitLive('quota', ws, 1)).generation).toBe('g2');
        expect(await cache.generationDebits('g1')).toBe(5);
        expect(await cache.generationDebits('g2')).toBe(1);
        expect(await cache.generationDebits('never')).toBeNull();

        await cache.dropGeneration('g1');
        expect(await cache.generationDebits('g1')).toBeNull();
        expect(await cache.readLive('quota', keys)).toEqual([1, 1]);
      });

      it('releaseLive gives a debit back only while its generation is live', async () => {
        const cache = await open();
        const ws = windows([10, 10]);
        const keys = ws.map((w) => w.key);
        await cache.beginGeneration('g1');
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        await cache.debitLive('quota', ws, 3);
        expect(await cache.releaseLive('quota', 'g1', keys, 1)).toBe(true);
        expect(await cache.readLive('quota', keys)).toEqual([2, 2]);
        expect(await cache.generationDebits('g1')).toBe(2);
        expect(await cache.releaseLive('quota', 'g1', ['quota:never'], 1)).toBe(true);
        expect(await cache.readLive('quota', ['quota:never'])).toEqual([0]);
        await cache.beginGeneration('g2');
        await cache.switchGeneration('quota', 'g1', { id: 'g2', position: 0 });
        await cache.addToGeneration('g2', [{ key: keys[0]!, count: 2, expiresAt: ws[0]!.expiresAt }]);
        expect(await cache.releaseLive('quota', 'g1', keys, 1)).toBe(false);
        expect(await cache.readLive('quota', keys)).toEqual([2, 0]);
      });

      it('a counter a rebuild creates expires at the given expiresAt; adding keeps it', async () => {
        const cache = await open();
        const soon = Date.now() + 200;
        await cache.beginGeneration('g1');
        await cache.addToGeneration('g1', [
          { key: 'quota:soon', count: 2, expiresAt: soon },
          { key: 'quota:later', count: 4, expiresAt: Date.now() + HOUR },
        ]);
        await cache.addToGeneration('g1', [{ key: 'quota:soon', count: 1, expiresAt: Date.now() + HOUR }]);
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        expect(await cache.readLive('quota', ['quota:soon', 'quota:later'])).toEqual([3, 4]);
        await sleepUntil(soon + 50);
        expect(await cache.readLive('quota', ['quota:soon', 'quota:later'])).toEqual([0, 4]);
      });

      it('debits racing a switch each land on exactly one generation, the one they report', async () => {
        const cache = await open();
        const ws = windows([1_000]);
        await cache.beginGeneration('a');
        await cache.beginGeneration('b');
        await cache.switchGeneration('quota', null, { id: 'a', position: 0 });
        const debits = Array.from({ length: 100 }, () => cache.debitLive('quota', ws, 1));
        const switched = cache.switchGeneration('quota', 'a', { id: 'b', position: 0 });
        const more = Array.from({ length: 100 }, () => cache.debitLive('quota', ws, 1));
        const results = await Promise.all([...debits, ...more]);
        expect(await switched).toBe(true);
        const onA = results.filter((r) => r.generation === 'a').length;
        // A generation no debit landed on may have no count at all (the Redis adapter sends a
        // turn's debits together, after a switch asked for in the same turn).
        expect((await cache.generationDebits('a')) ?? 0).toBe(onA);
        expect((await cache.generationDebits('b')) ?? 0).toBe(200 - onA);
        expect(await cache.readLive('quota', [ws[0]!.key])).toEqual([200 - onA]);
      });

      it('a generation whose build mark is gone (data lost mid-build) never goes live', async () => {
        const cache = await open();
        const ws = windows([10]);
        // Never begun: nothing marks it as a complete build.
        await cache.addToGeneration('g0', [{ key: ws[0]!.key, count: 1, expiresAt: ws[0]!.expiresAt }]);
        expect(await cache.switchGeneration('quota', null, { id: 'g0', position: 1 })).toBe(false);
        // Begun, then the server lost its keys: the later writes recreate counters, not the mark.
        await cache.beginGeneration('g1');
        await cache.addToGeneration('g1', [{ key: ws[0]!.key, count: 4, expiresAt: ws[0]!.expiresAt }]);
        await cache.delete('g:g1:#building');
        await cache.delete(`g:g1:${ws[0]!.key}`);
        await cache.addToGeneration('g1', [{ key: ws[0]!.key, count: 1, expiresAt: ws[0]!.expiresAt }]);
        expect(await cache.switchGeneration('quota', null, { id: 'g1', position: 2 })).toBe(false);
        expect(await cache.liveGeneration('quota')).toBeNull();
        await cache.beginGeneration('g2');
        expect(await cache.switchGeneration('quota', null, { id: 'g2', position: 2 })).toBe(true);
      });

      it('refundLive gives back on the live generation, counts it as logged, and says where', async () => {
        const cache = await open();
        const ws = windows([10]);
        const keys = ws.map((w) => w.key);
        expect(await cache.refundLive('quota', keys, 1)).toBeNull();
        await cache.beginGeneration('g1');
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        await cache.debitLive('quota', ws, 2);
        expect(await cache.refundLive('quota', keys, 1)).toBe('g1');
        expect(await cache.readLive('quota', keys)).toEqual([1]);
        expect(await cache.generationDebits('g1')).toBe(3);
        expect(await cache.refundLive('quota', keys, 5)).toBe('g1');
        expect(await cache.readLive('quota', keys)).toEqual([0]);
        expect(await cache.refundLive('quota', ['quota:never'], 1)).toBe('g1');
        expect(await cache.readLive('quota', ['quota:never'])).toEqual([0]);
      });

      it('refundLive with an id gives back once, however often it is sent (a retry after a lost answer)', async () => {
        const cache = await open();
        const ws = windows([10]);
        const keys = ws.map((w) => w.key);
        await cache.beginGeneration('g1');
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        await cache.debitLive('quota', ws, 8);
        expect(await cache.refundLive('quota', keys, 3, 'r-1')).toBe('g1');
        expect(await cache.refundLive('quota', keys, 3, 'r-1')).toBe('g1');
        expect(await cache.readLive('quota', keys)).toEqual([5]);
        expect(await cache.generationDebits('g1')).toBe(11);
        // Another id is another refund.
        expect(await cache.refundLive('quota', keys, 2, 'r-2')).toBe('g1');
        expect(await cache.readLive('quota', keys)).toEqual([3]);
        // A try after a rebuild's switch answers the generation the first one was given back on.
        await cache.beginGeneration('g2');
        expect(await cache.switchGeneration('quota', 'g1', { id: 'g2', position: 1 })).toBe(true);
        expect(await cache.refundLive('quota', keys, 2, 'r-2')).toBe('g1');
        expect((await cache.generationDebits('g2')) ?? 0).toBe(0);
      });

      it('addToGeneration with a negative count gives back, never below 0, never creating', async () => {
        const cache = await open();
        const at = Date.now() + HOUR;
        await cache.beginGeneration('g1');
        await cache.addToGeneration('g1', [{ key: 'chat:a', count: 2, expiresAt: at }]);
        await cache.addToGeneration('g1', [
          { key: 'chat:a', count: -3, expiresAt: at },
          { key: 'chat:b', count: -1, expiresAt: at },
        ]);
        await cache.addToGeneration('g1', [{ key: 'chat:b', count: 1, expiresAt: at }]);
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        expect(await cache.readLive('quota', ['chat:a', 'chat:b'])).toEqual([0, 1]);
        await expect(
          cache.addToGeneration('g1', [{ key: 'chat:a', count: 0.5, expiresAt: at }]),
        ).rejects.toThrow(RangeError);
      });

      it('rejects malformed generation ids before touching anything', async () => {
        const cache = await open();
        await expect(cache.addToGeneration('a:b', [])).rejects.toThrow(RangeError);
        await expect(cache.switchGeneration('quota', null, { id: '', position: 0 })).rejects.toThrow(
          RangeError,
        );
        await expect(cache.switchGeneration('quota', null, { id: 'g', position: -1 })).rejects.toThrow(
          RangeError,
        );
        expect(await cache.liveGeneration('quota')).toBeNull();
      });
    });

    describe('health and lifecycle', () => {
      it('health is ok on an open cache', async () => {
        const cache = await open();
        expect(await cache.health()).toEqual({ ok: true });
      });

      it('after close, health is not ok and operations reject with CacheUnavailableError', async () => {
        const cache = await harness.open();
        await cache.close();
        const health = await cache.health();
        expect(health.ok).toBe(false);
        expect(health.detail).toBeTruthy();
        await expect(cache.get('k')).rejects.toThrow(CacheUnavailableError);
        await expect(cache.debitWindows(windows([5]), 1)).rejects.toThrow(CacheUnavailableError);
        await cache.close();
      });
    });

    const { openReplicas } = harness;
    if (openReplicas) {
      describe('two replicas sharing one keyspace', () => {
        it('racing debits from two instances: exactly the room left is granted', async () => {
          const [a, b] = await openReplicas();
          opened.push(a, b);
          const ws = windows([1_000, 10]);
          await a.setWindows(
            ws.map((w, i) => ({ key: w.key, count: i === 1 ? 5 : 0, expiresAt: w.expiresAt })),
          );
          const results = await Promise.all(
            Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? a : b).debitWindows(ws, 1)),
          );
          expect(results.filter((r) => r.ok)).toHaveLength(5);
          expect(await b.readWindows(ws.map((w) => w.key))).toEqual([5, 10]);
          expect(await a.readWindows(ws.map((w) => w.key))).toEqual([5, 10]);
        });

        it('a value set by one instance is seen, and guarded, by the other', async () => {
          const [a, b] = await openReplicas();
          opened.push(a, b);
          expect(await a.setIfAbsent('nonce', 'from-a', { ttlMs: HOUR })).toBe(true);
          expect(await b.setIfAbsent('nonce', 'from-b', { ttlMs: HOUR })).toBe(false);
          expect(await b.get('nonce')).toBe('from-a');
          await b.delete('nonce');
          expect(await a.get('nonce')).toBeNull();
        });
      });
    }
  });
}
