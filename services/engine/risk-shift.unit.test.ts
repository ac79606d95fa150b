import { describe, expect, it } from 'vitest';
import { riskShiftOf, volatilityDecile } from './risk-shift.ts';

describe('the volatility decile shift', () => {
  it('bands a percentile: top at 90 and above, bottom at 10 and below', () => {
    expect([0, 10, 10.01, 50, 89.99, 90, 100].map(volatilityDecile)).toEqual([
      'bottom',
      'bottom',
      'middle',
      'middle',
      'middle',
      'top',
      'top',
    ]);
  });

  it('entering the top decile is a shift', () => {
    expect(riskShiftOf(72, 93)).toEqual({ from: 'middle', to: 'top' });
  });

  it('leaving the top decile is a shift', () => {
    expect(riskShiftOf(95, 80)).toEqual({ from: 'top', to: 'middle' });
  });

  it('entering and leaving the bottom decile are shifts, and so is going straight across', () => {
    expect(riskShiftOf(40, 5)).toEqual({ from: 'middle', to: 'bottom' });
    expect(riskShiftOf(10, 11)).toEqual({ from: 'bottom', to: 'middle' });
    expect(riskShiftOf(3, 97)).toEqual({ from: 'bottom', to: 'top' });
  });

  it('staying in a band is no shift, however far the percentile moves inside it', () => {
    expect(riskShiftOf(91, 100)).toBeNull();
    expect(riskShiftOf(11, 89)).toBeNull();
    expect(riskShiftOf(0, 10)).toBeNull();
  });

  it("a market's first verdict, or one after a verdict without a forecast, is no shift", () => {
    expect(riskShiftOf(null, 99)).toBeNull();
    expect(riskShiftOf(null, 1)).toBeNull();
    expect(riskShiftOf(50, null)).toBeNull();
  });
});
