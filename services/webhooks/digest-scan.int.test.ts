import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { openReplayFeed, SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import { rankedDigestScan } from './digest-scan.ts';

/**
 * A digest names a top-N market without a verdict with the feed's own refusal where the feed
 * cannot build the timeframe for it (the words scan_trade_calls gives), on the replay feed over a
 * folder of the shipped files: BINANCE_SPOT BTC with 5m and 1h candles, ETH with 1h only.
 */
describe('the digest scan names why a market has no verdict', () => {
  const dir = mkdtempSync(join(tmpdir(), 'digest-scan-'));
  let feed: MarketFeed;
  beforeAll(async () => {
    for (const file of ['BTCUSDT-5m', 'BTCUSDT-1h', 'ETHUSDT-1h']) {
      const path = `candles/binance-spot/${file}.csv.gz`;
      mkdirSync(join(dir, path, '..'), { recursive: true });
      symlinkSync(join(SHIPPED_MARKET_DIR, path), join(dir, path));
    }
    feed = await openReplayFeed({ run: false, dir });
  });
  afterAll(async () => {
    await feed?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const scanWith = (candles: boolean) =>
    rankedDigestScan({
      ranking: {
        prepare: async () => {},
        ranked: () => ['BTC', 'ETH'].map((coin) => ({ coin, quoteVolume24h: null })),
      },
      verdicts: { state: {}, checkpoint: 0, waitFor: async () => {} },
      headPosition: async () => 0,
      feed: candles ? feed : { kind: feed.kind, now: () => feed.now() },
    });

  it('the feed’s refusal for a timeframe it cannot build, "no verdict recorded" for one it can', async () => {
    const scan = await scanWith(true)({ exchange: 'BINANCE_SPOT', timeframe: '15m', topN: 2 });
    expect(scan.calls).toEqual([]);
    expect(scan.skipped).toEqual([
      { coin: 'BTC', reason: 'no verdict recorded for BTC 15m on BINANCE_SPOT' },
      { coin: 'ETH', reason: expect.stringMatching(/^timeframe 15m is not available for BINANCE_SPOT: /) },
    ]);
  });

  it('without the feed’s candles, every such market is "no verdict recorded"', async () => {
    const scan = await scanWith(false)({ exchange: 'BINANCE_SPOT', timeframe: '15m', topN: 2 });
    expect(scan.skipped.map((s) => s.reason)).toEqual([
      'no verdict recorded for BTC 15m on BINANCE_SPOT',
      'no verdict recorded for ETH 15m on BINANCE_SPOT',
    ]);
  });
});
