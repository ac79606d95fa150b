import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { FIXTURE_START, HOUR, recordHistory, syntheticVerdict } from '../../test/history-harness.ts';
import { type PendingOutcomes, pendingOutcomesProjection } from './projections.ts';
import { OutcomeResolver } from './resolver.ts';

const logger = pino({ level: 'silent' });
const runners: ProjectionRunner<PendingOutcomes>[] = [];

afterEach(async () => {
  for (const runner of runners.splice(0)) if (runner.running) await runner.stop();
});

/** The real replay feed, with its candle fetches counted per coin. */
function counted(feed: MarketFeed) {
  const fetches = new Map<string, number>();
  const proxy = new Proxy(feed, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop === 'candles') {
        return (...args: Parameters<MarketFeed['candles']>) => {
          fetches.set(args[1], (fetches.get(args[1]) ?? 0) + 1);
          return feed.candles(...args);
        };
      }
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { feed: proxy, fetches: (coin: string) => fetches.get(coin) ?? 0 };
}

/** `count` due verdicts of a coin the replay data does not list, in one stream. */
async function appendUnlisted(store: EventStore, count: number, from = 0) {
  const events = Array.from({ length: count }, (_, i) => {
    const v = syntheticVerdict(0, i, count, null);
    return newEvent('VerdictRecorded', {
      ...v,
      exchange: 'BINANCE' as const,
      coin: 'NOPE',
      timeframe: '1h' as const,
      candleCloseTime: FIXTURE_START - (40 + from + i) * HOUR,
    });
  });
  await store.append('verdicts-BINANCE-NOPE-1h', events);
}

async function pendingView(store: EventStore) {
  const runner = new ProjectionRunner(store, new MemoryProjectionStore(), pendingOutcomesProjection, {
    logger,
  });
  runners.push(runner);
  await runner.start();
  await runner.waitFor(await store.headPosition());
  return runner;
}

/** A resolver over the real feed with its fetches counted and a wall clock the test moves. */
function resolverOn(
  store: EventStore,
  feed: MarketFeed,
  pending: ProjectionRunner<PendingOutcomes>,
  options: { concurrency?: number; maxLag?: number } = {},
) {
  const counting = counted(feed);
  const clock = { wall: 1_000_000 };
  const resolver = new OutcomeResolver({
    store,
    feed: counting.feed,
    pending,
    logger,
    maxLag: options.maxLag ?? 1_000,
    intervalMs: 1_000,
    concurrency: options.concurrency ?? 4,
    clock: () => clock.wall,
  });
  return { resolver, fetches: counting.fetches, clock };
}

describe('outcome resolver', () => {
  it('asks for an unlisted market once per backoff, not once per pending verdict, and still labels the listed ones', async () => {
    const { store, feed } = await recordHistory({ steps: 2, settleHours: 30 });
    const listed = Object.keys((await pendingView(store)).state.pending).length;
    await appendUnlisted(store, 200);
    const pending = await pendingView(store);
    const { resolver, fetches, clock } = resolverOn(store, feed, pending);

    expect(await resolver.resolveDue()).toBe(listed);
    // Only the verdicts already in flight when the first fetch failed asked (before: all 200).
    const first = fetches('NOPE');
    expect(first).toBeGreaterThanOrEqual(1);
    expect(first).toBeLessThanOrEqual(4);
    expect(resolver.backingOff).toBe(1);
    expect(resolver.lastError).toMatch(/NOPE is not listed/);

    clock.wall += 500;
    await resolver.resolveDue();
    expect(fetches('NOPE')).toBe(first);

    clock.wall += 600; // past the first backoff (1 s)
    await resolver.resolveDue();
    const second = fetches('NOPE');
    expect(second - first).toBeGreaterThanOrEqual(1);
    expect(second - first).toBeLessThanOrEqual(4);

    clock.wall += 1_500; // the backoff doubled to 2 s
    await resolver.resolveDue();
    expect(fetches('NOPE')).toBe(second);
    clock.wall += 600;
    await resolver.resolveDue();
    expect(fetches('NOPE')).toBeGreaterThan(second);
    await pending.waitFor(await store.headPosition());
    expect(Object.keys(pending.state.pending)).toHaveLength(200);
  });

  it('backs off one verdict with too little history without holding back its market', async () => {
    // A BTC 1h verdict from before the replay data begins (its candles will never be there),
    // recorded first so that it is tried before the market's other verdicts.
    const store = new MemoryEventStore();
    const v = syntheticVerdict(0, 0, 1, null);
    await store.append('verdicts-BINANCE-BTC-1h-old', [
      newEvent('VerdictRecorded', {
        ...v,
        exchange: 'BINANCE' as const,
        coin: 'BTC',
        timeframe: '1h' as const,
        candleCloseTime: Date.parse('2024-01-01T00:00:00Z'),
      }),
    ]);
    const { feed } = await recordHistory({ steps: 2, settleHours: 30, store });
    const pending = await pendingView(store);
    const { resolver, fetches, clock } = resolverOn(store, feed, pending, { concurrency: 1 });

    // The market's other verdicts are labelled in the same tick; only the old one waits.
    const listed = Object.keys(pending.state.pending).length - 1;
    expect(await resolver.resolveDue()).toBe(listed);
    expect(resolver.lastError).toMatch(/BTC 1h candles/);
    expect(resolver.backingOff).toBe(1);
    const fetched = fetches('BTC');
    clock.wall += 500;
    expect(await resolver.resolveDue()).toBe(0);
    expect(fetches('BTC')).toBe(fetched);
    clock.wall += 600;
    await resolver.resolveDue();
    expect(fetches('BTC')).toBe(fetched + 1);
    await pending.waitFor(await store.headPosition());
    expect(Object.keys(pending.state.pending)).toHaveLength(1);
  });

  it('waits while the pending view is behind the head by more than maxLag, then resolves', async () => {
    const { store, feed } = await recordHistory({ steps: 2, settleHours: 30 });
    const pending = await pendingView(store);
    const due = Object.keys(pending.state.pending).length;
    expect(due).toBeGreaterThan(0);
    await pending.stop();
    // The log moves on while the view is stopped: a catch-up in miniature.
    await appendUnlisted(store, 50);
    const { resolver, fetches } = resolverOn(store, feed, pending, { maxLag: 10 });

    expect(await resolver.resolveDue()).toBe(0);
    expect(fetches('BTC') + fetches('NOPE')).toBe(0);

    await pending.start();
    await pending.waitFor(await store.headPosition());
    expect(await resolver.resolveDue()).toBe(due);
  });
});
