import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HistoryRow, OUTCOME_AFTER_CANDLES } from '../../contracts/history.ts';
import { type Exchange, TIMEFRAME_MS } from '../../contracts/market.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { answerSchema } from '../../test/openapi-answer.ts';

/**
 * What a quant recomputing the export needs: the unit of every number an outcome row carries, in
 * the OpenAPI document the service serves, and each row's figures as those descriptions say,
 * recomputed from the feed's own candles. Before the descriptions a row said `realised_vol` with
 * no unit: it is a per-candle fraction over 24 candles, and read beside the six-candle
 * `expected_move_pct` (percent) as if it were one, the forecast looked 2.5 × too wide.
 */
describe('the history export says the unit of every outcome figure, and its rows hold to it', () => {
  let fx: Awaited<ReturnType<typeof recordHistory>>;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;
  let key: string;

  beforeAll(async () => {
    fx = await recordHistory({ steps: 40 });
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
    key = await server.issue();
  });
  afterAll(async () => {
    await server?.close();
    await fx?.engine.close();
  });

  it("GET /openapi.json: each number of a row names its unit in the NDJSON row's schema", async () => {
    const ndjson = await answerSchema(server.url, '/api/verdicts', 'application/x-ndjson');
    const row = ndjson.anyOf!.find((s) => s.properties?.realised_vol !== undefined)!.properties!;
    const units: Record<string, RegExp> = {
      price: /USD/,
      candle_close_time: /Unix milliseconds/,
      inputs_json: /vol_expected_move_pct \(percent/,
      return_1: /a fraction/,
      return_6: /a fraction/,
      return_24: /a fraction/,
      net_centi_bps: /hundredths of a bp/,
      mae_bps: /in bps/,
      mfe_bps: /in bps/,
      realised_vol: /a fraction per candle: not percent and not over 6 candles/,
      lean_net_centi_bps: /hundredths of a bp/,
    };
    for (const [column, unit] of Object.entries(units)) {
      expect(row[column]?.description, column).toMatch(unit);
    }
  });

  it("every labelled row's figures are what their descriptions say, from the feed's candles", async () => {
    const answer = await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } });
    expect(answer.status).toBe(200);
    const rows = (await answer.text())
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as HistoryRow);
    const labelled = rows.filter((r) => r.outcome_id !== null);
    expect(labelled.filter((r) => r.call !== 'HOLD').length).toBeGreaterThan(10);
    const close = (a: number, b: number) =>
      expect(Math.abs(a - b)).toBeLessThan(1e-9 * Math.max(1, Math.abs(b)));
    for (const r of labelled) {
      const step = TIMEFRAME_MS[r.timeframe];
      const due = r.candle_close_time! + OUTCOME_AFTER_CANDLES * step;
      const candles = await fx.feed.candles(r.exchange as Exchange, r.coin, r.timeframe, {
        limit: OUTCOME_AFTER_CANDLES,
        until: due,
        min: OUTCOME_AFTER_CANDLES,
      });
      expect(candles[0]!.openTime).toBe(r.candle_close_time);
      const p = r.price!;
      close(r.return_1!, candles[0]!.close / p - 1);
      close(r.return_6!, candles[5]!.close / p - 1);
      close(r.return_24!, candles[23]!.close / p - 1);
      const logs = candles.map((c, i) => Math.log(c.close / (i === 0 ? p : candles[i - 1]!.close)));
      const mean = logs.reduce((a, b) => a + b, 0) / logs.length;
      close(r.realised_vol!, Math.sqrt(logs.reduce((a, b) => a + (b - mean) ** 2, 0) / (logs.length - 1)));
      const net = (direction: number) => Math.round((direction * r.return_6! * 10_000 - 10) * 100);
      if (r.lean !== null) expect(r.lean_net_centi_bps).toBe(net(r.lean === 'BUY' ? 1 : -1));
      const six = candles.slice(0, 6);
      const up = (Math.max(...six.map((c) => c.high)) / p - 1) * 10_000;
      const down = (Math.min(...six.map((c) => c.low)) / p - 1) * 10_000;
      if (r.call === 'HOLD') {
        expect([r.net_centi_bps, r.mae_bps, r.mfe_bps]).toEqual([null, null, null]);
      } else {
        const buy = r.call === 'BUY';
        expect(r.net_centi_bps).toBe(net(buy ? 1 : -1));
        close(r.mae_bps!, buy ? down : -up);
        close(r.mfe_bps!, buy ? up : -down);
      }
      // The risk forecast served, where the description says it is: σ in percent, band prices.
      const inputs = JSON.parse(r.inputs_json!) as Record<string, number>;
      if (inputs.vol_expected_move_pct !== undefined) {
        expect(inputs.vol_band_low).toBeLessThan(p);
        expect(inputs.vol_band_high).toBeGreaterThan(p);
        expect(inputs.vol_band_coverage).toBeGreaterThan(0);
        expect(inputs.vol_band_coverage).toBeLessThan(1);
        expect(Number.isInteger(inputs.vol_horizon_candles)).toBe(true);
      }
    }
  });
});
