import { describe, expect, it } from 'vitest';
import { bestFundingPair, isFresh, type VenueFundingInput } from './funding-arb.ts';

const T = 1_760_000_000_000;
const venue = (
  exchange: VenueFundingInput['exchange'],
  rate: number,
  intervalHours: number,
): VenueFundingInput => ({
  exchange,
  rate,
  intervalHours,
  fundingTime: T,
  nextFundingTime: T + intervalHours * 3_600_000,
  quoteVolume24h: null,
});

describe('bestFundingPair', () => {
  it('normalises each venue by its own interval before comparing', () => {
    // 0.01 % per 8 h (Binance) vs 0.0015 % per 1 h (Hyperliquid): per hour 0.00125 % vs 0.0015 %.
    const row = bestFundingPair('BTC', [venue('BINANCE', 0.0001, 8), venue('HYPERLIQUID', 0.000015, 1)])!;
    expect(row.best.longVenue).toBe('BINANCE');
    expect(row.best.shortVenue).toBe('HYPERLIQUID');
    expect(row.best.spreadBpsPerHour).toBeCloseTo((0.000015 - 0.0001 / 8) * 10_000, 12);
    expect(row.best.spreadBps).toBeCloseTo(0.2, 10);
    expect(row.best.annualizedPct).toBeCloseTo(0.0000025 * 8760 * 100, 10);
    expect(row.venues.map((v) => v.hourlyRate)).toEqual([0.0001 / 8, 0.000015]);
    expect(row.best.shortNextFundingTime).toBe(T + 3_600_000);
  });

  it('would be wrong to compare raw rates: a 4 h venue with the larger raw rate is the cheaper long', () => {
    const row = bestFundingPair('ETH', [
      venue('BYBIT', 0.0002, 4),
      venue('BINANCE', 0.00016, 8),
      venue('OKX', 0.00006, 1),
    ])!;
    // hourly: BYBIT 0.00005, BINANCE 0.00002, OKX 0.00006
    expect(row.best.longVenue).toBe('BINANCE');
    expect(row.best.shortVenue).toBe('OKX');
    expect(row.best.spreadBps).toBeCloseTo((0.00006 - 0.00002) * 8 * 10_000, 10);
  });

  it('handles negative funding: longs are paid where it is most negative', () => {
    const row = bestFundingPair('SOL', [venue('BINANCE', -0.0003, 8), venue('BYBIT', 0.0001, 8)])!;
    expect(row.best).toMatchObject({ longVenue: 'BINANCE', shortVenue: 'BYBIT' });
    expect(row.best.spreadBps).toBeCloseTo(4, 10);
  });

  it('needs two venues', () => {
    expect(bestFundingPair('XRP', [venue('BINANCE', 0.0001, 8)])).toBeNull();
    expect(bestFundingPair('XRP', [])).toBeNull();
  });
});

describe('isFresh', () => {
  it('accepts a rate within two intervals and refuses an older one', () => {
    expect(isFresh({ fundingTime: T, intervalHours: 8 }, T + 16 * 3_600_000)).toBe(true);
    expect(isFresh({ fundingTime: T, intervalHours: 8 }, T + 16 * 3_600_000 + 1)).toBe(false);
    expect(isFresh({ fundingTime: T, intervalHours: 1 }, T + 3 * 3_600_000)).toBe(false);
  });
});
