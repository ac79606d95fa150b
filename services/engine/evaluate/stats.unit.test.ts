import { describe, expect, it } from 'vitest';
import { brier, reliability, wilson } from './stats.ts';

describe('Wilson interval', () => {
  it('matches known values', () => {
    const a = wilson(5, 10);
    expect(a.low).toBeCloseTo(0.2366, 4);
    expect(a.high).toBeCloseTo(0.7634, 4);
    const b = wilson(0, 10);
    expect(b.low).toBe(0);
    expect(b.high).toBeCloseTo(0.2775, 4);
    const c = wilson(10, 10);
    expect(c.low).toBeCloseTo(0.7225, 4);
    expect(c.high).toBe(1);
    const d = wilson(81, 263);
    expect(d.low).toBeCloseTo(0.2553, 3);
    expect(d.high).toBeCloseTo(0.3662, 3);
  });

  it('is the whole unit interval with no data', () => {
    expect(wilson(0, 0)).toEqual({ low: 0, high: 1 });
  });
});

describe('Brier score and reliability bins', () => {
  it('computes the mean squared error', () => {
    expect(
      brier([
        { p: 1, hit: true },
        { p: 0, hit: false },
      ]),
    ).toBe(0);
    expect(
      brier([
        { p: 0.5, hit: true },
        { p: 0.5, hit: false },
      ]),
    ).toBe(0.25);
    expect(brier([])).toBeNaN();
  });

  it('groups predictions into equal-width bins with the observed share', () => {
    const bins = reliability(
      [
        { p: 0.42, hit: true },
        { p: 0.44, hit: false },
        { p: 0.71, hit: true },
        { p: 1, hit: true },
      ],
      0.05,
    );
    expect(bins.map((b) => [b.from, b.n, b.observed])).toEqual([
      [0.4, 2, 0.5],
      [expect.closeTo(0.7, 10), 1, 1],
      [expect.closeTo(0.95, 10), 1, 1],
    ]);
  });
});
