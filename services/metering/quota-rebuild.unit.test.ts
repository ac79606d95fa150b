import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import type { Cache } from '../../adapters/cache/port.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { foldEvents } from '../../projections/projection.ts';
import { runnersOn } from '../../projections/runner.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits, quotaBalancesProjection } from './quota-projection.ts';
import { QUOTA_FAMILY, QuotaCounters, rebuildQuotaGeneration } from './quota-rebuild.ts';
import { type QuotaSubject, quotaPeriod, quotaWindows } from './windows.ts';

const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 60 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);

describe('quota generations on the in-process cache', () => {
  it('a fresh cache has no counters: the first call rebuilds them from the log', async () => {
    const store = new MemoryEventStore();
    const key: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'free' };
    const first = new QuotaMeter({ cache: new MemoryCache(), store, plans: PLANS, now: () => T0 });
    for (let i = 0; i < 7; i++) await first.debit(key, 't');
    // A restart: a new process, a new in-process cache, the same log.
    const cache = new MemoryCache();
    expect(await cache.liveGeneration(QUOTA_FAMILY)).toBeNull();
    const restarted = new QuotaMeter({ cache, store, plans: PLANS, now: () => T0 });
    expect(await restarted.peek(key)).toMatchObject({ used: 7, daily: { used: 7 } });
    await Promise.all([first.counters.stop(), restarted.counters.stop()]);
  });

  it('a rebuild while debits run ends with every counter equal to the log', async () => {
    const memory = new MemoryEventStore();
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      readAll: async (options?: { after?: number; maxCount?: number }) => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        return memory.readAll(options);
      },
    });
    const cache = new MemoryCache();
    const meter = new QuotaMeter({ cache, store: memory, plans: PLANS, now: () => T0 });
    const subjects: QuotaSubject[] = [0, 1, 2].map((i) => ({
      id: `p${i}-${randomUUID()}`,
      kind: 'key',
      plan: 'pro',
    }));
    let running = true;
    let n = 0;
    const worker = async () => {
      while (running) {
        await meter.debit(subjects[n++ % 3]!, 't');
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    const traffic = Promise.all([worker(), worker(), worker()]);
    await expect.poll(() => n, { interval: 1 }).toBeGreaterThan(30);
    // Traffic goes on across the switch, then stops soon after it: the replay must then catch up
    // on its own (it ends once the replaced generation's debits are all on the log). Traffic that
    // never stopped could outrun a slowed reader on a loaded machine until the settle deadline.
    const outcome = await rebuildQuotaGeneration({
      store,
      cache,
      pageSize: 50,
      settleMs: 10_000,
      onLive: () => void setTimeout(() => (running = false), 20),
    });
    running = false;
    await traffic;
    expect(outcome.switched).toBe(true);
    for (const subject of subjects) {
      const logged = (await memory.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0);
      const keys = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
      expect(await cache.readLive(QUOTA_FAMILY, keys)).toEqual([logged, logged]);
    }
    await meter.counters.stop();
  });
});

describe('the replay after a switch, reading slower than the settle time', () => {
  /**
   * A rebuild into `cache` during which `late` debits, counted on `counting` (a generation the
   * rebuild does not know, or the one it replaces), land on the log after its fold and before
   * its switch; its reads take 5 ms a page once it is live, and its settle time is 20 ms.
   */
  async function rebuildWithLateDebits(counting: MemoryCache, cache: MemoryCache, expected?: null) {
    const memory = new MemoryEventStore();
    const meter = new QuotaMeter({ cache: counting, store: memory, plans: PLANS, now: () => T0 });
    const subject: QuotaSubject = { id: `p-${randomUUID()}`, kind: 'key', plan: 'pro' };
    await meter.debit(subject, 't');
    const late = 600;
    const racing: Cache = Object.assign(Object.create(cache) as Cache, {
      switchGeneration: async (...args: Parameters<Cache['switchGeneration']>) => {
        for (let i = 0; i < late; i++) await meter.debit(subject, 't');
        return cache.switchGeneration(...args);
      },
    });
    let switched = false;
    const slow: EventStore = Object.assign(Object.create(memory) as EventStore, {
      readAll: async (options?: { after?: number; maxCount?: number }) => {
        if (switched) await new Promise((resolve) => setTimeout(resolve, 5));
        return memory.readAll(options);
      },
    });
    const outcome = await rebuildQuotaGeneration({
      store: slow,
      cache: racing,
      pageSize: 10,
      settleMs: 20,
      onLive: () => {
        switched = true;
      },
      ...(expected === null ? { expected } : {}),
    });
    await meter.counters.stop();
    const keys = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
    return { outcome, late, counters: await cache.readLive(QUOTA_FAMILY, keys) };
  }

  // What failed CI on a loaded machine: the replay stopped at the settle deadline with thousands
  // of the replaced generation's debits still unread on the log, so the counters ended short of
  // it (free calls). The deadline bounds how late a debit is appended, not how long reading takes.
  it('replays every debit the replaced generation logged (its count known)', async () => {
    const cache = new MemoryCache();
    const { outcome, late, counters } = await rebuildWithLateDebits(cache, cache);
    expect(outcome.switched).toBe(true);
    expect(outcome.previous).not.toBeNull();
    expect(outcome.replayed).toBe(late);
    expect(counters).toEqual([late + 1, late + 1]);
  });

  it('replays every debit up to the head at the deadline when the count is unknown (a lost generation)', async () => {
    // The debits were counted on a cache this rebuild never sees (lost with a server's data).
    const { outcome, late, counters } = await rebuildWithLateDebits(
      new MemoryCache(),
      new MemoryCache(),
      null,
    );
    expect(outcome.switched).toBe(true);
    expect(outcome.previous).toBeNull();
    expect(outcome.replayed).toBe(late);
    expect(counters).toEqual([late + 1, late + 1]);
  });

  it('waits on a store that holds reads back below its head, instead of spinning', async () => {
    const memory = new MemoryEventStore();
    const cache = new MemoryCache();
    await new QuotaMeter({ cache: new MemoryCache(), store: memory, plans: PLANS, now: () => T0 }).debit(
      { id: `p-${randomUUID()}`, kind: 'key', plan: 'pro' },
      't',
    );
    let reads = 0;
    // Its head is 5 past what any read returns (PostgreSQL, below a write transaction still open).
    const held: EventStore = Object.assign(Object.create(memory) as EventStore, {
      headPosition: async () => (await memory.headPosition()) + 5,
      // Each read yields to the event loop, so a replay spinning on them still lets the abort fire.
      readAll: async (options?: { after?: number; maxCount?: number }) => {
        reads++;
        await new Promise((resolve) => setImmediate(resolve));
        return memory.readAll(options);
      },
    });
    const abort = new AbortController();
    const rebuilt = rebuildQuotaGeneration({
      store: held,
      cache,
      expected: null,
      settleMs: 0,
      signal: abort.signal,
      onLive: () => void setTimeout(() => abort.abort(), 300),
    });
    const outcome = await rebuilt;
    expect(outcome.switched).toBe(true);
    // Polled every 50 ms for 300 ms, not read back to back.
    expect(reads).toBeLessThan(30);
  });
});

/** The log, recording where each full read started: a boot that folds from 0 reads `after: 0`. */
function recordingReads(memory: MemoryEventStore): { store: EventStore; starts: number[] } {
  const starts: number[] = [];
  const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
    readAll: (options?: { after?: number; maxCount?: number }) => {
      starts.push(options?.after ?? 0);
      return memory.readAll(options);
    },
  });
  return { store, starts };
}

describe('quota checkpoint (the fold of the counters run as a projection, its snapshots in the projection store)', () => {
  it('a restart folds only the debits after the checkpoint, and counts them all', async () => {
    const memory = new MemoryEventStore();
    const checkpoints = new MemoryProjectionStore();
    const key: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'free' };
    const meterOn = (store: EventStore, cache: MemoryCache) =>
      new QuotaMeter({
        cache,
        store,
        plans: PLANS,
        now: () => T0,
        counters: new QuotaCounters({ store, cache, checkpoints }),
      });
    // Other streams' events sit before the debits: a fold from 0 would read them too.
    for (let i = 0; i < 30; i++) await memory.append(`noise-${i}`, [{ type: 'Noise', data: { i } } as never]);

    const first = meterOn(memory, new MemoryCache());
    for (let i = 0; i < 5; i++) await first.debit(key, 't');
    await first.counters.stop();
    const saved = await checkpoints.load(quotaBalancesProjection.name);
    expect(saved?.checkpoint).toBe(await memory.headPosition());

    // Debits the checkpoint does not hold (a process that crashed before saving one).
    const crashed = new QuotaMeter({ cache: new MemoryCache(), store: memory, plans: PLANS, now: () => T0 });
    for (let i = 0; i < 3; i++) await crashed.debit(key, 't');
    await crashed.counters.stop();

    const { store, starts } = recordingReads(memory);
    const restarted = meterOn(store, new MemoryCache());
    expect(await restarted.peek(key)).toMatchObject({ used: 8, daily: { used: 8 } });
    expect(Math.min(...starts)).toBe(saved?.checkpoint);
    await restarted.counters.stop();
    expect((await checkpoints.load(quotaBalancesProjection.name))?.checkpoint).toBe(
      await memory.headPosition(),
    );
  });

  it('a checkpoint ahead of the log (another data directory) is ignored: the log is folded from 0', async () => {
    const checkpoints = new MemoryProjectionStore();
    const key: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'free' };
    await checkpoints.save(quotaBalancesProjection.name, {
      version: quotaBalancesProjection.version,
      checkpoint: 1_000,
      state: {
        [quotaWindows(key.id, PLANS.free, quotaPeriod(T0))[0]!.key]: { count: 500, expiresAt: T0 + 1e10 },
      },
    });
    const memory = new MemoryEventStore();
    const cache = new MemoryCache();
    const meter = new QuotaMeter({
      cache,
      store: memory,
      plans: PLANS,
      now: () => T0,
      counters: new QuotaCounters({ store: memory, cache, checkpoints }),
    });
    for (let i = 0; i < 2; i++) await meter.debit(key, 't');
    expect(await meter.peek(key)).toMatchObject({ used: 2 });
    await meter.counters.stop();
    expect((await checkpoints.load(quotaBalancesProjection.name))?.checkpoint).toBe(
      await memory.headPosition(),
    );
  });
});

describe('the fold of the counters (quotaBalancesProjection)', () => {
  it('drops the windows expired before the latest day folded, and keeps the ones still counting', async () => {
    const memory = new MemoryEventStore();
    const debit = (subject: string, at: number, units: number) => {
      const { day, month } = quotaPeriod(at);
      const data = { subject, subjectKind: 'key', plan: 'pro', tool: 't', units, day, month };
      return memory.append(`quota-${subject}`, [{ type: 'QuotaDebitsRecorded', data } as never]);
    };
    const DAY = 86_400_000;
    await debit('old', T0, 5);
    await debit('new', T0 + 40 * DAY, 3);
    await debit('new', T0 + 41 * DAY, 2);
    const state = foldEvents(quotaBalancesProjection, await memory.readAll());
    const keys = (subject: string, at: number) =>
      quotaWindows(subject, PLANS.pro, quotaPeriod(at)).map((w) => w.key);
    for (const key of keys('old', T0)) expect(state[key]).toBeUndefined();
    // The month of the days before stays while the day after still counts in it.
    expect(keys('new', T0 + 41 * DAY).map((key) => state[key]?.count)).toEqual([5, 2]);
    expect(state[keys('new', T0 + 40 * DAY)[1]!]?.count).toBe(3);
  });

  it('once stopped, a call that finds no counters does not start the fold again on the closing store', async () => {
    const memory = new MemoryEventStore();
    const cache = new MemoryCache();
    const key: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'free' };
    const counters = new QuotaCounters({ store: memory, cache, checkpoints: new MemoryProjectionStore() });
    await counters.stop();
    const meter = new QuotaMeter({ cache, store: memory, plans: PLANS, now: () => T0, counters });
    // The counters are rebuilt from the log alone; no runner is left on the store.
    expect(await meter.debit(key, 't')).toMatchObject({ ok: true });
    expect(runnersOn(memory).map((r) => r.name)).not.toContain(quotaBalancesProjection.name);
  });
});
