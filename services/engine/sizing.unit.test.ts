import { describe, expect, it } from 'vitest';
import { SizingSchema } from '../../contracts/tools.ts';
import { sizedCopy, sizeFor } from './sizing.ts';

describe('sizing for a stated risk budget', () => {
  it('sizes the notional for one σ of the log return and reads the stops off the band', () => {
    // σ 2 % over the horizon, an 80 % band about ±1.28 σ around 50,000.
    const sizing = sizeFor({
      price: 50_000,
      expectedMovePct: 2,
      bandLow: 50_000 * Math.exp(-1.28 * 0.02),
      bandHigh: 50_000 * Math.exp(1.3 * 0.02),
      budgetUsd: 100,
    });
    expect(SizingSchema.parse(sizing)).toEqual(sizing);
    expect(sizing.risk_budget_usd).toBe(100);
    expect(sizing.notional_usd).toBe(5_000);
    expect(sizing.quantity).toBe(0.1);
    expect(sizing.long_stop!.price).toBeCloseTo(48_736.245, 3);
    expect(sizing.long_stop!.distance_pct).toBeCloseTo(2.5275, 4);
    expect(sizing.long_stop!.loss_usd).toBe(126.38);
    expect(sizing.short_stop!.distance_pct).toBeCloseTo(2.634, 3);
    expect(sizing.short_stop!.loss_usd).toBe(131.7);
  });

  it('means what it says: a one-σ move of the log return moves the notional by about the budget', () => {
    for (const sigmaPct of [0.1, 0.65, 1.85, 6]) {
      const sigma = sigmaPct / 100;
      const { notional_usd } = sizeFor({
        price: 2.5,
        expectedMovePct: sigmaPct,
        bandLow: 2.4,
        bandHigh: 2.6,
        budgetUsd: 250,
      });
      // The simple return of a one-σ log move differs from σ by about σ²/2.
      const loss = notional_usd! * (1 - Math.exp(-sigma));
      const gain = notional_usd! * (Math.exp(sigma) - 1);
      expect(loss).toBeLessThanOrEqual(250);
      expect(gain).toBeGreaterThanOrEqual(250);
      expect(Math.abs((loss + gain) / 2 - 250)).toBeLessThan(250 * sigma);
    }
  });

  it('scales with the budget and inversely with σ', () => {
    const base = { price: 100, expectedMovePct: 1, bandLow: 98, bandHigh: 102 };
    const one = sizeFor({ ...base, budgetUsd: 100 });
    const ten = sizeFor({ ...base, budgetUsd: 1_000 });
    const wider = sizeFor({ ...base, expectedMovePct: 4, budgetUsd: 100 });
    expect(ten.notional_usd).toBe(10 * one.notional_usd!);
    expect(ten.long_stop!.loss_usd).toBe(10 * one.long_stop!.loss_usd!);
    expect(wider.notional_usd).toBe(one.notional_usd! / 4);
    // The stops are the band's, whatever the budget.
    expect(ten.long_stop!.price).toBe(98);
    expect(ten.short_stop!.price).toBe(102);
  });

  it('a σ of 0 has no finite size; a band edge on the wrong side of the price has no stop', () => {
    const flat = sizeFor({ price: 100, expectedMovePct: 0, bandLow: 99, bandHigh: 101, budgetUsd: 100 });
    expect(flat).toMatchObject({ notional_usd: null, quantity: null });
    expect(flat.long_stop).toEqual({ price: 99, distance_pct: 1, loss_usd: null });
    expect(SizingSchema.parse(flat)).toEqual(flat);
    const skewed = sizeFor({ price: 100, expectedMovePct: 1, bandLow: 100, bandHigh: 100.5, budgetUsd: 100 });
    expect(skewed.long_stop).toBeNull();
    expect(skewed.short_stop).toMatchObject({ price: 100.5, loss_usd: 50 });
    expect(SizingSchema.parse(skewed)).toEqual(skewed);
  });

  it('quantity is what its description says: the notional before its rounding to cents ÷ price, to eight significant digits', () => {
    // SOL 4h at the smallest budget: a 0.53 USD notional, whose rounding is 0.3 % of it.
    for (const budgetUsd of [0.01, 100, 10_000_000]) {
      const [price, sigmaPct] = [208.4, 1.8863];
      const sizing = sizeFor({ price, expectedMovePct: sigmaPct, bandLow: 200, bandHigh: 215, budgetUsd });
      const exact = budgetUsd / (sigmaPct / 100) / price;
      expect(sizing.quantity! / exact).toBeCloseTo(1, 7);
      const off = Math.abs(sizing.quantity! * price - sizing.notional_usd!);
      expect(off).toBeLessThanOrEqual(0.005 + 5e-8 * sizing.notional_usd! + 1e-9);
    }
  });

  it("a stop's loss is what its description says, recomputed from the served fields to the cent", () => {
    // The contract: loss_usd = notional_usd × |stop − price| ÷ price, i.e. the budget × the stop's
    // distance in σ. distance_pct is rounded to four decimals, so it does not give the loss to the
    // cent at a large notional (BTC 5m, σ 0.15 %: 100 USD is about a 65,000 USD notional).
    for (const budgetUsd of [100, 1_000_000, 10_000_000]) {
      for (const [price, sigmaPct] of [
        [117_393.72, 0.1549],
        [2.85218, 0.3681],
        [0.00000931, 2.3186],
      ] as const) {
        const bandLow = price * Math.exp((-1.18 * sigmaPct) / 100);
        const bandHigh = price * Math.exp((1.16 * sigmaPct) / 100);
        const sizing = sizeFor({ price, expectedMovePct: sigmaPct, bandLow, bandHigh, budgetUsd });
        for (const stop of [sizing.long_stop!, sizing.short_stop!]) {
          const distance = Math.abs(stop.price - price) / price;
          // notional_usd is itself rounded to the cent: at most half a cent × the distance off.
          expect(Math.abs(stop.loss_usd! - sizing.notional_usd! * distance)).toBeLessThanOrEqual(0.0051);
          expect(Math.abs(stop.loss_usd! - (budgetUsd * distance) / (sigmaPct / 100))).toBeLessThanOrEqual(
            0.0051,
          );
          expect(Math.abs(stop.distance_pct - 100 * distance)).toBeLessThanOrEqual(0.00005 + 1e-12);
        }
      }
    }
  });

  it('keeps one sized copy per answer and budget, and a bounded number of budgets', () => {
    const answer = {};
    let made = 0;
    const size = () => ({ n: ++made });
    const first = sizedCopy(answer, 100, size);
    expect(sizedCopy(answer, 100, size)).toBe(first);
    expect(sizedCopy(answer, 250, size)).not.toBe(first);
    expect(made).toBe(2);
    // Another answer (the next candle's) gets copies of its own.
    expect(sizedCopy({}, 100, size)).not.toBe(first);
    for (let budget = 1; budget <= 40; budget++) sizedCopy(answer, budget, size);
    const before = made;
    sizedCopy(answer, 100, size);
    expect(made).toBe(before + 1);
  });
});
