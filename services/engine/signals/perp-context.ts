import type { PerpContext } from '../../../contracts/signals.ts';

/**
 * Contrarian lean from perpetual context. Funding: hourly = rate / interval_hours, APR =
 * hourly × 8760; the neutral level is the common 0.01 %/8h base rate (≈ 10.95 % APR). Funding
 * far above it means crowded longs (lean SELL), far below means crowded shorts (lean BUY).
 * Basis: perp premium over spot, read the same way. Dead zones keep ordinary levels at 0.
 */
export const NEUTRAL_FUNDING_APR = (0.0001 / 8) * 8760;
const FUNDING_DEAD_ZONE_APR = 0.15;
const FUNDING_FULL_APR = 0.6;
const BASIS_DEAD_ZONE = 0.001;
const BASIS_FULL = 0.006;

export interface PerpLean {
  lean: number;
  fundingApr: number | null;
  basis: number | null;
}

function contrarian(excess: number, deadZone: number, full: number): number {
  const magnitude = Math.abs(excess);
  if (magnitude <= deadZone) return 0;
  return -Math.sign(excess) * Math.min(1, (magnitude - deadZone) / (full - deadZone));
}

/** No perpetual context: no lean (shared, as scheduled spot verdicts ask for it on every close). */
const NO_LEAN: Readonly<PerpLean> = Object.freeze({ lean: 0, fundingApr: null, basis: null });

export function perpLean(context: PerpContext | undefined): PerpLean {
  if (context === undefined) return NO_LEAN;
  const parts: number[] = [];
  let fundingApr: number | null = null;
  let basis: number | null = null;
  if (context?.funding) {
    fundingApr = (context.funding.rate / context.funding.intervalHours) * 8760;
    parts.push(contrarian(fundingApr - NEUTRAL_FUNDING_APR, FUNDING_DEAD_ZONE_APR, FUNDING_FULL_APR));
  }
  if (context?.perpClose !== undefined && context.spotClose !== undefined) {
    basis = (context.perpClose - context.spotClose) / context.spotClose;
    parts.push(contrarian(basis, BASIS_DEAD_ZONE, BASIS_FULL));
  }
  const lean = parts.length === 0 ? 0 : parts.reduce((a, b) => a + b, 0) / parts.length;
  return { lean, fundingApr, basis };
}
