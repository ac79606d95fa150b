import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openReplayFeed, type ReplayFeed, SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';

/**
 * A timeframe no venue serves, asked by a caller naming no coin: a scan is refused with its
 * venue's top market's refusal; GET /api/verdicts?timeframe= and get_track_record, which ask every
 * venue, are refused in words about every venue. Where the venue's coins hold different files
 * (the full shared data set, the default replay beside the checkout: BTC and ETH with 5m and 1h,
 * AAVE and others with 1h only), the words must not name a market's coin ("the replay data holds
 * 5m, 1h candles of BTC here"), a coin the caller never named: a timeframe no coin of the venue
 * builds is said of the venue.
 */
describe('a timeframe no coin of a venue builds is refused in words about the venue, not a coin', () => {
  let dir: string;
  let feed: ReplayFeed;
  let fx: Awaited<ReturnType<typeof recordHistory>>;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;
  let key: string;

  beforeAll(async () => {
    // BTC with 5m and 1h candles, ETH with 1h only: the coins of BINANCE_SPOT differ, as on the full set.
    dir = await mkdtemp(join(tmpdir(), 'unserved-words-'));
    for (const f of [
      'candles/binance-spot/BTCUSDT-1h.csv.gz',
      'candles/binance-spot/BTCUSDT-5m.csv.gz',
      'candles/binance-spot/ETHUSDT-1h.csv.gz',
    ]) {
      await cp(join(SHIPPED_MARKET_DIR, f), join(dir, f));
    }
    feed = await openReplayFeed({ dir, start: Date.UTC(2025, 9, 25, 10, 32), run: false });
    fx = await recordHistory({ steps: 3 });
    server = await startHistoryServer({ store: fx.store, feed });
    key = await server.issue();
  });
  afterAll(async () => {
    await server?.close();
    await fx?.engine.close();
    await feed?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('GET /api/verdicts?timeframe=1m: 422 unsupported_timeframe naming the venues and what they serve, no coin', async () => {
    const answer = await fetch(`${server.url}/api/verdicts?timeframe=1m`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(answer.status).toBe(422);
    const body = (await answer.json()) as { code: string; message: string; field: string };
    expect(body).toMatchObject({ code: 'unsupported_timeframe', field: 'timeframe' });
    // No venue asked is every venue: said of them all (here BINANCE_SPOT alone) and what they serve.
    expect(body.message).toBe(
      'timeframe 1m is not available on any venue here (BINANCE_SPOT): they serve 5m, 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d',
    );
    expect(body.message).not.toMatch(/\b(BTC|ETH)\b/);
  });

  it('a coin asked for a timeframe another coin of the venue builds is still told about its own files', async () => {
    const eth = await feed.candles('BINANCE_SPOT', 'ETH', '15m', { limit: 1 }).catch((e: Error) => e);
    expect((eth as Error).message).toBe(
      'timeframe 15m is not available for BINANCE_SPOT: the replay data holds 1h candles of ETH here, which build ' +
        '1h, 2h, 4h, 8h, 12h, 1d; 15m is served by no replayed venue (or on the live feed)',
    );
    // And 1m, which no coin here builds, reads the same whichever coin is asked.
    const words = async (coin: string) =>
      ((await feed.candles('BINANCE_SPOT', coin, '1m', { limit: 1 }).catch((e: Error) => e)) as Error)
        .message;
    expect(await words('ETH')).toBe(await words('BTC'));
  });
});
