import { describe, expect, it } from 'vitest';
import type { ScanFundingArbOutput } from '../../contracts/tools.ts';
import { feesNote } from './funding-scan.ts';

type Opportunity = ScanFundingArbOutput['opportunities'][number];
// Only the break-even time decides the sentence; the rest of the row is carried, not read.
const at = (breakEvenHours: number | null) => ({ carry: { breakEvenHours } }) as Opportunity;

describe('the funding scan says in words whether the fees are covered', () => {
  it('counts the opportunities covering both legs’ fees within 72 h, and those not within 7 days', () => {
    expect(feesNote([at(null), at(null)])).toBe(
      "none of the 2 opportunities listed is expected to cover both legs' entry and exit fees within 72 h (breakEvenHours ≤ 72), nor within 7 days (breakEvenHours null)",
    );
    expect(feesNote([at(30), at(100), at(null)])).toBe(
      "1 of the 3 opportunities listed is expected to cover both legs' entry and exit fees within 72 h (breakEvenHours ≤ 72); 1 is not expected to within 7 days (breakEvenHours null)",
    );
    expect(feesNote([at(8), at(72)])).toBe(
      "all of the 2 opportunities listed are expected to cover both legs' entry and exit fees within 72 h (breakEvenHours ≤ 72)",
    );
    expect(feesNote([at(73), at(100)])).toMatch(/^none of the 2 opportunities listed is expected .*72\)$/);
    expect(feesNote([at(null)])).toBe(
      "the opportunity listed is not expected to cover both legs' entry and exit fees within 72 h (breakEvenHours ≤ 72), nor within 7 days (breakEvenHours null)",
    );
    expect(feesNote([at(12)])).toBe(
      "the opportunity listed is expected to cover both legs' entry and exit fees within 72 h (breakEvenHours ≤ 72)",
    );
  });
});
