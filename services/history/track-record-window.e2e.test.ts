import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRow, TrackRecordResponse } from '../../contracts/history.ts';
import { MARKETS, recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { answerSchema } from '../../test/openapi-answer.ts';

const DAY = 86_400_000;

/**
 * Which verdicts a window counts, said and held to: GET /api/track-record's `window` is the UTC
 * days of the verdicts' candle closes up to asOf's day (not of their outcomes), which a quant
 * recounting the export must know (a 1d verdict, resolved 24 days on, never counts in 7d). The
 * answer's schema said only "7d | 30d | 90d | all".
 */
describe('a track-record window counts the verdicts whose candle closed on its days, and says so', () => {
  let fx: Awaited<ReturnType<typeof recordHistory>>;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;
  let key: string;

  beforeAll(async () => {
    // Ten days of hourly verdicts on one market, the outcomes of all but the last day in.
    const market = MARKETS.filter((m) => m.exchange === 'BINANCE' && m.coin === 'BTC');
    fx = await recordHistory({ steps: 240, markets: market, settleHours: 24 });
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
    key = await server.issue();
  });
  afterAll(async () => {
    await server?.close();
    await fx?.engine.close();
  });

  it("GET /openapi.json: the answer's window says which verdicts it counts", async () => {
    const answer = await answerSchema(server.url, '/api/track-record', 'application/json');
    expect(answer.properties?.window?.description).toMatch(
      /^7d, 30d or 90d: the verdicts whose candle closed on the last 7, 30 or 90 UTC days up to asOf's day/,
    );
  });

  it('7d counts exactly the resolved verdicts whose candle closed on the last 7 UTC days of asOf, all counts every one', async () => {
    const rows = (
      await (
        await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } })
      ).text()
    )
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as HistoryRow);
    const record = async (window: string) =>
      (await (await fetch(`${server.url}/api/track-record?window=${window}`)).json()) as TrackRecordResponse;
    const [week, all] = [await record('7d'), await record('all')];
    const resolved = rows.filter((r) => r.outcome_id !== null && r.outcome_position! <= all.asOfPosition);
    const counted = (r: TrackRecordResponse) => r.overall.calls + r.overall.holds;
    expect(counted(all)).toBe(resolved.length);
    const first = Math.floor(Date.parse(week.asOf) / DAY) - 6;
    const inWeek = resolved.filter((r) => Math.floor(r.candle_close_time! / DAY) >= first);
    expect(inWeek.length).toBeGreaterThan(0);
    expect(inWeek.length).toBeLessThan(resolved.length);
    expect(counted(week)).toBe(inWeek.length);
  });
});
