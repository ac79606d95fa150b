import { describe, expect, it, vi } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { ProjectionStore, StoredProjection } from '../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { newEvent } from '../contracts/events.ts';
import { eventStatsProjection } from './event-stats.ts';
import { defineProjection, foldEvents, type Projection } from './projection.ts';
import { ProjectionRunner } from './runner.ts';

/** The port's simplest faithful form, so this file tests the runner and nothing else. */
class MapProjectionStore implements ProjectionStore {
  readonly saved = new Map<string, StoredProjection<unknown>>();
  saves = 0;
  async load<S>(name: string) {
    const s = this.saved.get(name);
    return s ? (structuredClone(s) as StoredProjection<S>) : null;
  }
  async save<S>(name: string, snapshot: StoredProjection<S>) {
    this.saves += 1;
    this.saved.set(name, structuredClone(snapshot) as StoredProjection<unknown>);
  }
  async delete(name: string) {
    this.saved.delete(name);
  }
}

interface Ledger {
  balances: Record<string, number>;
  /** Order-sensitive: a doubled, lost or reordered event changes it. */
  digest: number;
}
const ledger: Projection<Ledger> = {
  name: 'ledger',
  version: 1,
  initial: () => ({ balances: {}, digest: 7 }),
  evolve(state, event: RecordedEvent) {
    const { amount } = event.data as { amount: number };
    const sign = event.type === 'Credited' ? 1 : -1;
    state.balances[event.stream] = (state.balances[event.stream] ?? 0) + sign * amount;
    state.digest = (state.digest * 31 + event.position * amount) % 1_000_000_007;
    return state;
  },
};

/** Folds one type and passes over the others (real type names: eventTypes takes the catalog's; the memory store takes any data). */
const credits: Projection<{ total: number }> = {
  name: 'credits',
  version: 1,
  eventTypes: ['RegimeShifted'],
  initial: () => ({ total: 0 }),
  evolve: (state, event) => ({ total: state.total + (event.data as { amount: number }).amount }),
};

async function appendMany(store: MemoryEventStore, count: number, seed = 1) {
  let x = seed;
  for (let i = 0; i < count; ) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    const batch = 1 + (x % 5);
    const events = Array.from({ length: batch }, (_, j) => ({
      type: (x + j) % 3 === 0 ? 'Debited' : 'Credited',
      data: { amount: 1 + (((x >> 3) + j) % 97) },
    }));
    await store.append(`account-${x % 13}`, events);
    i += batch;
  }
}

describe('ProjectionRunner', () => {
  it('a rebuild from position 0 reaches exactly the state of the live run', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    await appendMany(store, 200, 3);
    const runner = new ProjectionRunner(store, snapshots, ledger, { snapshotEvery: 50 });
    await runner.start();
    // Live: appends while the runner tails.
    await appendMany(store, 300, 11);
    const head = await store.headPosition();
    await runner.waitFor(head);
    const live = structuredClone(runner.state);

    await runner.rebuild();
    await runner.waitFor(head);
    expect(runner.state).toEqual(live);
    expect(runner.state).toEqual(foldEvents(ledger, await store.readAll()));
    await runner.stop();
    expect(snapshots.saved.get('ledger')?.checkpoint).toBe(head);
  });

  it('resumes from its snapshot without folding any event twice', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    await appendMany(store, 120, 5);
    const first = new ProjectionRunner(store, snapshots, eventStatsProjection, { snapshotEvery: 1000 });
    await first.start();
    await first.waitFor(await store.headPosition());
    await first.stop();
    expect(snapshots.saved.get('event-stats')?.checkpoint).toBe(await store.headPosition());

    await appendMany(store, 80, 9);
    const second = new ProjectionRunner(store, snapshots, eventStatsProjection);
    await second.start();
    const head = await store.headPosition();
    await second.waitFor(head);
    expect(second.state.total).toBe(head);
    expect(second.state).toEqual(foldEvents(eventStatsProjection, await store.readAll()));
    await second.stop();
  });

  it('snapshots state and checkpoint together every N events', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    const runner = new ProjectionRunner(store, snapshots, ledger, { snapshotEvery: 10 });
    await runner.start();
    await appendMany(store, 100, 17);
    await runner.waitFor(await store.headPosition());
    const snap = snapshots.saved.get('ledger') as StoredProjection<Ledger>;
    // Whatever the snapshot's checkpoint, its state is exactly the fold up to that checkpoint.
    const upTo = (await store.readAll()).filter((e) => e.position <= snap.checkpoint);
    expect(snap.state).toEqual(foldEvents(ledger, upTo));
    // Saved while folding (before any stop), at most once per N events: a page of events is
    // folded whole and looked at once, and a save in flight is not queued behind again.
    expect(snapshots.saves).toBeGreaterThanOrEqual(1);
    expect(snapshots.saves).toBeLessThanOrEqual(10);
    await runner.stop();
  });

  it('saves a state that is slow to encode less often than the gap, so saving stays a small share of the time', async () => {
    const store = new MemoryEventStore();
    // Each save takes 60 ms: saved every 10 ms by the interval and by count, it would save ~25 times.
    class SlowStore extends MapProjectionStore {
      override async save<S>(name: string, snapshot: StoredProjection<S>) {
        await new Promise((r) => setTimeout(r, 60));
        await super.save(name, snapshot);
      }
    }
    const snapshots = new SlowStore();
    const runner = new ProjectionRunner(store, snapshots, ledger, {
      snapshotEvery: 1,
      snapshotGapMs: 0,
      snapshotIntervalMs: 10,
    });
    await runner.start();
    const started = performance.now();
    while (performance.now() - started < 1_500) {
      await appendMany(store, 5, Math.floor(performance.now()));
      await new Promise((r) => setTimeout(r, 5));
    }
    await runner.waitFor(await store.headPosition());
    // One save, then none for 20 × 60 ms = 1.2 s, then at most one more (slow timers allow a third).
    expect(snapshots.saves).toBeGreaterThanOrEqual(1);
    expect(snapshots.saves).toBeLessThanOrEqual(3);
    await runner.stop();
    // A stop still saves at once, whatever the last save cost.
    const snap = snapshots.saved.get('ledger') as StoredProjection<Ledger>;
    expect(snap.checkpoint).toBe(await store.headPosition());
  });

  it('does not save an unchanged state again while only events it passes over arrive, and saves it on stop', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    const runner = new ProjectionRunner(store, snapshots, credits, {
      snapshotEvery: 1,
      snapshotGapMs: 0,
      snapshotIntervalMs: 10,
    });
    await runner.start();
    await store.append('account-1', [{ type: 'RegimeShifted', data: { amount: 5 } }]);
    await runner.waitFor(await store.headPosition());
    while (snapshots.saves === 0) await new Promise((r) => setTimeout(r, 5));
    // 300 ms of events of a type the fold passes over: by count and by the 10 ms timer each would
    // have saved the same state again with a later checkpoint.
    const started = performance.now();
    while (performance.now() - started < 300) {
      await store.append('account-2', [{ type: 'VerdictRecorded', data: { amount: 1 } }]);
      await new Promise((r) => setTimeout(r, 5));
    }
    await runner.waitFor(await store.headPosition());
    expect(snapshots.saves).toBe(1);
    // A change is saved again at once.
    await store.append('account-1', [{ type: 'RegimeShifted', data: { amount: 2 } }]);
    await runner.waitFor(await store.headPosition());
    await expect.poll(() => snapshots.saves, { interval: 5 }).toBe(2);
    expect(snapshots.saved.get('credits')?.state).toEqual({ total: 7 });
    // Stopping still saves the checkpoint the fold reached.
    await store.append('account-2', [{ type: 'VerdictRecorded', data: { amount: 1 } }]);
    await runner.stop({ drainMs: 1_000 });
    expect(snapshots.saved.get('credits')?.checkpoint).toBe(await store.headPosition());
  });

  it('keeps a longer count gap for an unchanged state too (the quota runner saves every 300 s)', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    // The runner's clock moved ahead by hand: a minute, five, without waiting for them.
    const real = performance.now.bind(performance);
    let ahead = 0;
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => real() + ahead);
    const runner = new ProjectionRunner(store, snapshots, credits, {
      snapshotEvery: 1,
      snapshotGapMs: 300_000,
      snapshotIntervalMs: 3_600_000,
    });
    try {
      await runner.start();
      await store.append('account-1', [{ type: 'RegimeShifted', data: { amount: 5 } }]);
      await runner.waitFor(await store.headPosition());
      while (snapshots.saves === 0) await new Promise((r) => setTimeout(r, 5));
      ahead = 61_000;
      await store.append('account-2', [{ type: 'VerdictRecorded', data: { amount: 1 } }]);
      await runner.waitFor(await store.headPosition());
      await new Promise((r) => setTimeout(r, 50));
      expect(snapshots.saves).toBe(1);
      ahead = 301_000;
      await store.append('account-2', [{ type: 'VerdictRecorded', data: { amount: 1 } }]);
      await runner.waitFor(await store.headPosition());
      const until = real() + 2_000;
      while (snapshots.saves === 1 && real() < until) await new Promise((r) => setTimeout(r, 5));
      expect(snapshots.saves).toBe(2);
    } finally {
      await runner.stop();
      clock.mockRestore();
    }
  });

  it('drains to the head on a graceful stop', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    const runner = new ProjectionRunner(store, snapshots, ledger);
    await runner.start();
    await appendMany(store, 2_000, 29);
    await runner.stop({ drainMs: 5_000 });
    const head = await store.headPosition();
    expect(snapshots.saved.get('ledger')?.checkpoint).toBe(head);
    expect(snapshots.saved.get('ledger')?.state).toEqual(foldEvents(ledger, await store.readAll()));
  });

  it('rebuilds when the stored snapshot has another version', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    await appendMany(store, 40, 23);
    const head = await store.headPosition();
    await snapshots.save('ledger', {
      version: 0,
      checkpoint: head,
      state: { balances: { bogus: 1 }, digest: 0 },
    });
    const runner = new ProjectionRunner(store, snapshots, ledger);
    await runner.start();
    await runner.waitFor(head);
    expect(runner.state).toEqual(foldEvents(ledger, await store.readAll()));
    await runner.stop();
  });

  it('stops at a fold that throws instead of skipping the event', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    const strict: Projection<number> = {
      name: 'strict',
      version: 1,
      initial: () => 0,
      evolve(state, event) {
        if (event.type === 'Poison') throw new Error('cannot fold Poison');
        return state + 1;
      },
    };
    await store.append('s', [
      { type: 'Ok', data: {} },
      { type: 'Ok', data: {} },
    ]);
    await store.append('s', [{ type: 'Poison', data: {} }]);
    await store.append('s', [{ type: 'Ok', data: {} }]);
    const runner = new ProjectionRunner(store, snapshots, strict);
    await runner.start();
    await expect(runner.waitFor(4, 300)).rejects.toThrow(/did not reach position 4/);
    expect(runner.error?.message).toBe('cannot fold Poison');
    expect(runner.checkpoint).toBe(2);
    expect(runner.state).toBe(2);
    await runner.stop();
    expect(snapshots.saved.get('strict')?.checkpoint).toBe(2);
  });

  it('a projection of a few types folds them in log order, validated, passes the rest over, and stops where one throws', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MapProjectionStore();
    const keys = defineProjection({
      name: 'keys',
      version: 1,
      eventTypes: ['ApiKeyIssued', 'ApiKeyRevoked'],
      initial: () => ({ log: [] as string[] }),
      evolve(state, event) {
        if (event.data.keyId === 'poison') throw new Error('cannot fold poison');
        state.log.push(`${event.position}:${event.type}:${event.data.keyId}`);
        return state;
      },
    });
    const issued = (keyId: string) =>
      newEvent('ApiKeyIssued', {
        keyId,
        keyHash: 'a'.repeat(64),
        prefix: 'sk',
        plan: 'pro',
        owner: 'o',
        via: 'operator',
      });
    await store.append('a', [
      { type: 'Other', data: {} },
      issued('k1'),
      { type: 'ApiKeyRevoked', data: { keyId: 42 } },
      newEvent('QuotaDebited', {
        subject: 's',
        subjectKind: 'key',
        plan: 'pro',
        tool: 't',
        units: 1,
        day: '2026-11-23',
        month: '2026-11',
        requestId: 'r',
      }),
      newEvent('ApiKeyRevoked', { keyId: 'k1', reason: 'r' }),
      { type: 'Other', data: {} },
    ]);
    const runner = new ProjectionRunner(store, snapshots, keys);
    await runner.start();
    await runner.waitFor(6);
    // The invalid revocation (position 3) is passed over; the trailing event of another type
    // still moves the checkpoint to the head.
    expect(runner.state.log).toEqual(['2:ApiKeyIssued:k1', '5:ApiKeyRevoked:k1']);
    expect(runner.state).toEqual(foldEvents(keys, await store.readAll()));
    expect(runner.checkpoint).toBe(6);
    await store.append('a', [{ type: 'Other', data: {} }, issued('poison'), issued('k2')]);
    await expect(runner.waitFor(9, 300)).rejects.toThrow(/did not reach position 9/);
    expect(runner.error?.message).toBe('cannot fold poison');
    expect(runner.checkpoint).toBe(7);
    await runner.stop();
    expect(snapshots.saved.get('keys')?.checkpoint).toBe(7);
  });
});
