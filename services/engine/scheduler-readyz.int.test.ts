import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { loadConfig } from '../../contracts/config.ts';
import { altnameError } from '../../test/readyz-app.ts';
import { engineComponent } from './component.ts';
import { SignalEngine } from './engine.ts';

describe("the engine scheduler's readiness check after a failed run", () => {
  let feed: ReplayFeed;
  afterEach(async () => {
    await feed?.close();
  });

  it('carries the error as its cause and shows only its reason', async () => {
    feed = await openReplayFeed({ run: false });
    const engine = new SignalEngine({ feed, store: new MemoryEventStore() });
    const component = engineComponent({ config: loadConfig({}), engine, logger: pino({ level: 'silent' }) });
    const check = component.checks!().scheduler!;
    expect(await check()).toMatchObject({ ok: true, lastError: null });
    expect((await check()).cause).toBeUndefined();

    // A run stopped by the store's TLS refusal, whose words name its bare host.
    const altname = altnameError();
    component.scheduler.lastFailure = { error: altname };
    const failed = await check();
    expect(failed).toMatchObject({ ok: false, lastError: 'TLS certificate refused' });
    expect(failed.cause).toBe(altname);
  });

  it('answers a tick asked during a run with the run that follows it, so its caller reads what happened after the ask', async () => {
    feed = await openReplayFeed({ run: false });
    // The real replay feed, whose market list waits for the gate of its call (one per listing,
    // opened by the test) and then throws what `thrown` held when it was called, if anything.
    const gates: { open: () => void; opened: Promise<void> }[] = [];
    let thrown: Error | undefined;
    const gated = new Proxy(feed, {
      get(target, prop) {
        if (prop === 'markets') {
          return async (...args: Parameters<ReplayFeed['markets']>) => {
            const failure = thrown;
            let open!: () => void;
            const opened = new Promise<void>((resolve) => {
              open = resolve;
            });
            gates.push({ open, opened });
            await opened;
            if (failure) throw failure;
            return target.markets(...args);
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const engine = new SignalEngine({ feed: gated, store: new MemoryEventStore() });
    const component = engineComponent({
      config: loadConfig({ SCHEDULE_TIMEFRAMES: '1h' }),
      engine,
      logger: pino({ level: 'silent' }),
    });
    const check = component.checks!().scheduler!;
    // Answered: done, and how many runs had begun then (the failed run's retry, a second later,
    // begins another).
    const settled = (p: Promise<void>) => {
      const state = { done: false, runs: 0 };
      void p.then(() => {
        state.done = true;
        state.runs = gates.length;
      });
      return state;
    };
    try {
      // A run under way (its listing held); then the store goes away and two ticks are asked for.
      const first = component.scheduler.tick('1h');
      await expect.poll(() => gates.length).toBe(1);
      thrown = new Error('store away');
      const asked = settled(component.scheduler.tick('1h'));
      const alsoAsked = settled(component.scheduler.tick('1h'));
      gates[0]!.open();
      await first;
      expect(await check()).toMatchObject({ ok: true, lastError: null });
      // One run follows the first, for both asks; until it ends, neither tick has answered.
      await expect.poll(() => gates.length).toBe(2);
      await new Promise((resolve) => setImmediate(resolve));
      expect([asked.done, alsoAsked.done]).toEqual([false, false]);
      gates[1]!.open();
      await expect.poll(() => asked.done && alsoAsked.done).toBe(true);
      const failed = await check();
      expect(failed).toMatchObject({ ok: false, lastError: 'failed' });
      expect(failed.cause).toBe(thrown);
      expect([asked.runs, alsoAsked.runs]).toEqual([2, 2]);
    } finally {
      for (const gate of gates) gate.open();
      await component.scheduler.stop();
    }
  });

  it('fails on a run that threw anything, undefined, null or a string included, and passes after one that succeeds', async () => {
    feed = await openReplayFeed({ run: false });
    // The real replay feed, whose market list throws what `thrown` holds while it is set.
    const thrown: { value?: unknown } = {};
    const throwing = new Proxy(feed, {
      get(target, prop) {
        if (prop === 'markets' && 'value' in thrown) {
          return async () => {
            throw thrown.value;
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const engine = new SignalEngine({ feed: throwing, store: new MemoryEventStore() });
    const component = engineComponent({
      config: loadConfig({ SCHEDULE_TIMEFRAMES: '1h' }),
      engine,
      logger: pino({ level: 'silent' }),
    });
    const check = component.checks!().scheduler!;
    try {
      for (const value of [undefined, null, 'store away', new Error('store away')]) {
        thrown.value = value;
        await component.scheduler.tick('1h');
        const failed = await check();
        expect(failed, String(value)).toMatchObject({ ok: false, lastError: 'failed' });
        expect(failed.cause, String(value)).toBe(value);

        delete thrown.value;
        await component.scheduler.tick('1h');
        expect(await check(), String(value)).toMatchObject({ ok: true, lastError: null });
      }
    } finally {
      await component.scheduler.stop();
    }
  });
});
