import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeFailure } from '../services/engine/operation-errors.ts';
import { requireNats } from './nats-server.ts';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';

const reachable = await requireNats();

/**
 * A scan_digest subscription that could never list a market is refused at create: the venue and
 * timeframe scan_trade_calls refuses, in its code and words, and those the engine does not record
 * (the default schedule on the replay: BINANCE_SPOT at 15m, 1h, 4h).
 */
describe.runIf(reachable)('scan_digest venues and timeframes', () => {
  let stack: WebhookStack;
  let key: string;

  beforeAll(async () => {
    stack = await startWebhookStack({ checkDigests: true });
    key = await stack.issue();
  });
  afterAll(async () => {
    await stack?.close();
  });

  const digest = (exchange: string, timeframe: string) =>
    stack.request('POST', '/api/webhooks', key, {
      url: 'https://127.0.0.1:9/digest',
      events: ['scan_digest'],
      exchange,
      timeframe,
      top_n: 10,
      cadence: '1h',
    });

  it('refuses what scan_trade_calls refuses for the same venue and timeframe, with its code and words', async () => {
    for (const [exchange, timeframe, field] of [
      ['BYBIT', '1h', 'exchange'],
      ['BINANCE', '15m', 'timeframe'],
      ['BINANCE_SPOT', '1m', 'timeframe'],
    ] as const) {
      const scan = describeFailure(
        await stack.engine.scanTradeCalls({ exchange, timeframe }).catch((err: unknown) => err),
      );
      expect(scan?.status).toBe(422);
      const res = await digest(exchange, timeframe);
      expect(res.status, `${exchange} ${timeframe}`).toBe(422);
      expect(res.body).toMatchObject({ code: scan!.code, message: scan!.message, field });
    }
  });

  it('refuses a venue or timeframe the scan serves but the schedule does not record', async () => {
    // The scan answers BINANCE 1h and BINANCE_SPOT 2h (rows, not a refusal), and records what it
    // computed; off the schedule, nothing keeps those verdicts current for a digest.
    for (const [exchange, timeframe] of [
      ['BINANCE', '1h'],
      ['BINANCE_SPOT', '2h'],
    ] as const) {
      const scan = await stack.engine.scanTradeCalls({ exchange, timeframe, topN: 2 });
      expect(scan.calls.length).toBeGreaterThan(0);
    }
    const venue = await digest('BINANCE', '1h');
    expect(venue.status).toBe(400);
    expect(venue.body).toMatchObject({ code: 'INVALID_FIELD', field: 'exchange' });
    expect(venue.body.message).toContain('on BINANCE_SPOT only');
    const timeframe = await digest('BINANCE_SPOT', '2h');
    expect(timeframe.status).toBe(400);
    expect(timeframe.body).toMatchObject({ code: 'INVALID_FIELD', field: 'timeframe' });
    expect(timeframe.body.message).toContain('at 15m, 1h, 4h only');
    // Nothing was written for any refusal; a recorded venue and timeframe is accepted.
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks).toEqual([]);
    expect((await digest('BINANCE_SPOT', '1h')).status).toBe(201);
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks).toHaveLength(1);
  });
});
