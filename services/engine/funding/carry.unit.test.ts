import { describe, expect, it } from 'vitest';
import { carryFigures } from './carry.ts';
import { defaultCarry } from './default-carry.ts';

describe('carry figures as a scan serves them', () => {
  it('give the share of similar opportunities net positive to 4 decimals, as the track record does', () => {
    const table = defaultCarry;
    // Every bucket of the shipped table, both legs on venues the table's fees know.
    for (const bucket of table.buckets) {
      const { horizons } = carryFigures(table, (bucket.fromBps + 0.01) / 8, 'BINANCE', 'BYBIT');
      for (const h of horizons) {
        expect(h.shareNetPositive).toBe(Number(h.shareNetPositive.toFixed(4)));
        expect(h.shareNetPositive).toBeGreaterThanOrEqual(0);
        expect(h.shareNetPositive).toBeLessThanOrEqual(1);
      }
    }
  });
});
