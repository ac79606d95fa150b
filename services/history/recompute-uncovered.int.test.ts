import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import type { HistoryRow } from '../../contracts/history.ts';
import { OutcomeRecompute } from './recompute.ts';

/**
 * verify --data's `uncovered`: the outcomes a market-data folder does not give, counted under
 * their venue, coin and timeframe (each series found by its key, not by a walk of every series),
 * with the dates they need. Live verdicts past the shipped folder's end: none is in its data.
 */
const DAY = 86_400_000;
const START = Date.UTC(2100, 0, 1);

function row(position: number, exchange: string, coin: string, timeframe: string, day: number): HistoryRow {
  return {
    position,
    verdict_id: `v${position}`,
    stream: `verdict-${exchange}-${coin}-${timeframe}`,
    revision: 0,
    revealed: true,
    exchange,
    coin,
    timeframe,
    hash: `h${position}`,
    prev_hash: null,
    call: 'BUY',
    confidence: 50,
    score: 1,
    regime: 'ranging',
    price: 100,
    candle_close_time: START + day * DAY,
    feed: 'live',
    engine_version: 'test',
    trigger: 'schedule',
    inputs_json: '{}',
    result: 'hit',
  } as HistoryRow;
}

let recompute: OutcomeRecompute;
beforeAll(async () => {
  recompute = await OutcomeRecompute.open(SHIPPED_MARKET_DIR);
});
afterAll(async () => {
  await recompute?.close();
});

describe('verify --data: the series a folder does not cover', () => {
  it('counts each outcome under its own series, in the order first met, with the dates they need', async () => {
    const rows = [
      row(1, 'BINANCE', 'BTC', '1h', 3),
      row(2, 'OKX', 'ETH', '4h', 1),
      row(3, 'BINANCE', 'BTC', '1h', 0),
      // The same coin and timeframe on another venue, another timeframe of the same coin: their own.
      row(4, 'OKX', 'BTC', '1h', 5),
      row(5, 'BINANCE', 'BTC', '4h', 2),
      // A coin holding the key's separator is a series of its own too.
      row(6, 'BINANCE', 'BTC\u00001h', '1h', 7),
      row(7, 'OKX', 'ETH', '4h', 9),
    ];
    for (const r of rows) await recompute.check(r);
    const date = (day: number) => new Date(START + day * DAY).toISOString().slice(0, 10);
    expect(recompute.report).toMatchObject({ checked: 0, notInData: rows.length });
    expect(
      recompute.report.uncovered.map(({ exchange, coin, timeframe, outcomes, from }) => ({
        series: `${exchange} ${coin} ${timeframe}`,
        outcomes,
        from,
      })),
    ).toEqual([
      { series: 'BINANCE BTC 1h', outcomes: 2, from: date(0) },
      { series: 'OKX ETH 4h', outcomes: 2, from: date(1) },
      { series: 'OKX BTC 1h', outcomes: 1, from: date(5) },
      { series: 'BINANCE BTC 4h', outcomes: 1, from: date(2) },
      { series: 'BINANCE BTC\u00001h 1h', outcomes: 1, from: date(7) },
    ]);
    // To the last outcome's due date: 24 candles past the latest verdict's.
    const [btc, eth] = recompute.report.uncovered;
    expect(btc!.to).toBe(new Date(START + 3 * DAY + 24 * 3_600_000).toISOString().slice(0, 10));
    expect(eth!.to).toBe(new Date(START + 9 * DAY + 24 * 4 * 3_600_000).toISOString().slice(0, 10));
  });
});
