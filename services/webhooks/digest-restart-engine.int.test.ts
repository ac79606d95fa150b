import { describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import {
  digestPassed,
  HOURLY_DIGEST,
  pooledDispatcherStack,
  watchedEngine,
} from '../../test/webhooks-harness.ts';

const HOUR = 3_600_000;
/**
 * The dispatchers' digest wait for the verdict projection here: shorter than the product's
 * (DIGEST_CATCH_UP_MS), so a test holds the engine past twice this one.
 */
const CATCH_UP_MS = 1_000;

/**
 * `npm start` back after a stop: engine and dispatcher in one process on the LMDB log, the webhook
 * projection resumed from its snapshot, the replay clock moved on across boundaries meanwhile. The
 * engine's catch-up on the closes missed while down lands seconds after the dispatcher's first
 * digest pass began (here: held until that pass has asked the engine about its period's close and
 * the digest's own wait for the projection, CATCH_UP_MS, has passed twice over since). The first
 * digest after the restart still lists the markets, with the verdicts of its period's close,
 * instead of naming every one in skipped as behind it.
 */
describe('the first digest after a restart, on the LMDB log with the engine in the process', () => {
  const setup = pooledDispatcherStack('restartengine', {
    bus: 'memory',
    lmdb: true,
    digestCatchUpMs: CATCH_UP_MS,
    startDispatcher: false,
  });
  type Dispatcher = Awaited<ReturnType<typeof setup.pool.start>>;

  /**
   * Subscriptions of a key of `owner`'s (HOURLY_DIGEST, each with `overrides`) seen by a whole digest
   * pass of `dispatcher`, then the replay clock moved 10 minutes past the next hour's boundary
   * (`next`); `from`: the deliveries the receiver had before it.
   */
  async function subscribedPastBoundary(
    dispatcher: Dispatcher,
    owner: string,
    overrides: Record<string, unknown>[] = [{}],
  ) {
    const { stack, receiver } = setup;
    const key = await stack.issue(owner);
    const created = [];
    for (const override of overrides) {
      const sub = await stack.request('POST', '/api/webhooks', key, {
        url: receiver.url,
        ...HOURLY_DIGEST,
        ...override,
      });
      expect(sub.status, JSON.stringify(sub.body)).toBe(201);
      created.push(sub.body.id as string);
    }
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    // Seen before the boundary: its series takes the next period's digest.
    await digestPassed(dispatcher);
    const from = receiver.received.length;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    return { key, created, from, next, clock };
  }

  /**
   * How long the engine is held: until the digest of `close` has asked `engine` about that close and
   * twice the digest's catch-up wait has passed since, or until `sent` (a digest that did not wait).
   */
  const heldPastCatchUp = (engine: ReturnType<typeof watchedEngine>, close: number, sent: Promise<unknown>) =>
    Promise.race([
      sent,
      engine.askedFor(close).then(() => new Promise((resolve) => setTimeout(resolve, 2 * CATCH_UP_MS))),
    ]);

  /**
   * A dispatcher with an engine scheduler in its process (`watched`: as the dispatcher sees it), the
   * engine not started (held), and subscriptions of `owner`'s on it seen before the next boundary
   * (subscribedPastBoundary).
   */
  async function heldEngineDispatcher(owner: string, overrides?: Record<string, unknown>[]) {
    const engine = setup.newScheduler();
    const watched = watchedEngine(engine);
    const dispatcher = await setup.pool.start(new MemoryProjectionStore(), watched);
    return { engine, watched, dispatcher, ...(await subscribedPastBoundary(dispatcher, owner, overrides)) };
  }

  /** Stops a test's dispatcher and engine and deletes its subscriptions: the next test's digests are its own. */
  async function retire(
    dispatcher: Dispatcher,
    engine: { stop(): Promise<void> },
    key: string,
    ids: string[],
  ) {
    await setup.pool.stop(dispatcher);
    await engine.stop();
    for (const id of ids) {
      expect((await setup.stack.request('DELETE', `/api/webhooks/${id}`, key)).status).toBe(200);
    }
  }

  it('lists the markets with the verdicts of its close once the engine has caught up', async () => {
    const { receiver, pool, newScheduler, digests } = setup;
    const snapshots = new MemoryProjectionStore();
    const before = newScheduler();
    before.start();
    await before.firstRound;
    const first = await pool.start(snapshots, before);
    const { key, created, next, clock } = await subscribedPastBoundary(first, 'test');
    await receiver.waitFor(1, 60_000);
    expect(digests()[0]!.calls).toHaveLength(HOURLY_DIGEST.top_n);

    // Both stopped across three boundaries; back within the third one's period, the dispatcher
    // first and the engine's catch-up held past the digest's catch-up wait.
    await pool.stop(first);
    await before.stop();
    const back = next + 3 * HOUR;
    clock.setTime(back + 10 * 60_000);
    const after = newScheduler();
    const watched = watchedEngine(after);
    const again = await pool.start(snapshots, watched);
    await heldPastCatchUp(watched, back, receiver.waitFor(2, 60_000));
    after.start();
    await receiver.waitFor(2, 60_000);

    const digest = digests()[1]!;
    expect(digest.period_start).toBe(new Date(back).toISOString());
    expect(digest.skipped).toEqual([]);
    expect(digest.calls).toHaveLength(HOURLY_DIGEST.top_n);
    for (const call of digest.calls) expect(call.candle_close_time! * 1000).toBeGreaterThanOrEqual(back);
    await retire(again, after, key, created);
  });

  it("sends one subscription's digest while another's waits for the engine", async () => {
    const { receiver, digests } = setup;
    // The engine records 1h only: a 4h digest has no close of the engine's to wait for.
    const { engine, dispatcher, key, created, from } = await heldEngineDispatcher('overlap', [
      {},
      { timeframe: '4h' },
    ]);
    // The engine is held until the 4h digest arrives.
    await receiver.waitFor(from + 1, 60_000);
    engine.start();
    await receiver.waitFor(from + 2, 60_000);

    const sent = digests().slice(from);
    expect(sent.map((d) => d.timeframe)).toEqual(['4h', '1h']);
    expect(sent[1]!.calls).toHaveLength(HOURLY_DIGEST.top_n);
    await retire(dispatcher, engine, key, created);
  });

  it('leaves the period unsent when the engine caught up only past it, and sends the current one', async () => {
    const { receiver, digests } = setup;
    const { engine, watched, dispatcher, from, next, clock } = await heldEngineDispatcher('passed');
    // Its digest pass for the period at `next` under way (waiting for the held engine), the period
    // passes; the engine then evaluates up to the close after it.
    await heldPastCatchUp(watched, next, receiver.waitFor(from + 1, 60_000));
    clock.setTime(next + HOUR + 10 * 60_000);
    engine.start();
    await receiver.waitFor(from + 1, 60_000);

    const digest = digests()[from]!;
    expect(digest.period_start).toBe(new Date(next + HOUR).toISOString());
    expect(digest.calls.map((call) => call.candle_close_time! * 1000)).toEqual(
      Array(HOURLY_DIGEST.top_n).fill(next + HOUR),
    );
    await digestPassed(dispatcher);
    expect(dispatcher.digestPeriodsSkipped()).toBe(1);
  });
});
