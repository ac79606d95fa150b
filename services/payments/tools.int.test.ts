import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { loadConfig } from '../../contracts/config.ts';
import { TOOL_NAMES, TOOLS } from '../../contracts/tools.ts';
import { SignalEngine } from '../engine/engine.ts';
import type { OperationContext, SignalOperations } from '../engine/operations.ts';
import { paidTools } from './tools.ts';

describe('paid tools over the engine', () => {
  let feed: ReplayFeed;
  let engine: SignalEngine;

  beforeEach(async () => {
    feed = await openReplayFeed({ run: false });
    engine = new SignalEngine({
      feed,
      store: new MemoryEventStore(),
      publicBaseUrl: 'https://signals.example',
    });
  });
  afterEach(async () => {
    await engine.close();
  });

  it('hand the engine the body the route validated, without a second parse', async () => {
    // The engine, recording the context each operation is called with.
    const contexts: OperationContext[] = [];
    const ops = new Proxy(engine, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (typeof value !== 'function') return value;
        return (input: unknown, ctx: OperationContext = {}) => {
          contexts.push(ctx);
          return (value as (i: unknown, c: OperationContext) => unknown).call(target, input, ctx);
        };
      },
    }) as unknown as SignalOperations;
    const tools = paidTools(loadConfig({}));
    expect(tools.map((t) => t.name)).toEqual([...TOOL_NAMES]);
    const call = tools.find((t) => t.name === 'get_trade_call')!;
    // What the route's read of the body gives run: the schema's output (coin upper-cased, defaults in).
    const body = TOOLS.get_trade_call.input.parse({ coin: 'btc', timeframe: '1h' });
    const served = await call.run(ops, body, 'req-1');
    expect(contexts).toEqual([{ requestId: 'req-1', parsed: true }]);
    expect(served).toMatchObject({ coin: 'BTC', timeframe: '1h' });
    expect(served).toEqual(await engine.getTradeCall({ coin: 'btc', timeframe: '1h' }));
  });
});
