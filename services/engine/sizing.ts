import type { Sizing } from '../../contracts/tools.ts';
import { setBounded } from '../shared/bounded-map.ts';

/**
 * Sizing for a stated risk budget over one forecast horizon. σ is the forecast standard deviation
 * of the log return over the horizon (`expected_move_pct` / 100), so the notional budget ÷ σ
 * gains or loses about the budget on a one-σ move; the stops are the band's edges (a long's at
 * band_low, a short's at band_high) and what that notional loses there. Pure: the answers call it
 * per call with the caller's budget, on a forecast computed once per candle.
 */
export interface SizingInput {
  price: number;
  expectedMovePct: number;
  bandLow: number;
  bandHigh: number;
  budgetUsd: number;
}

/** USD amounts in cents; quantities to eight significant digits (a coin's smallest lot is coarser);
 *  a stop's distance in percent to four decimals (a millionth of the price). */
const cents = (x: number) => Math.round(x * 100) / 100;
const pct4 = (x: number) => Math.round(x * 10_000) / 10_000;
const significant = (x: number) => Number(x.toPrecision(8));

export function sizeFor({ price, expectedMovePct, bandLow, bandHigh, budgetUsd }: SizingInput): Sizing {
  const sigma = expectedMovePct / 100;
  const notional = sigma > 0 && Number.isFinite(sigma) ? budgetUsd / sigma : null;
  const stop = (at: number, distance: number) =>
    distance > 0
      ? {
          price: at,
          distance_pct: pct4(100 * distance),
          loss_usd: notional === null ? null : cents(notional * distance),
        }
      : null;
  return {
    risk_budget_usd: budgetUsd,
    notional_usd: notional === null ? null : cents(notional),
    quantity: notional === null ? null : significant(notional / price),
    long_stop: stop(bandLow, (price - bandLow) / price),
    short_stop: stop(bandHigh, (bandHigh - price) / price),
  };
}

/** Sized copies kept per answer; past this, the oldest budget goes (a caller chooses the budget). */
const SIZED_PER_ANSWER = 16;
const copies = new WeakMap<object, Map<number, object>>();

/**
 * The copy of `answer` sized for `budget`, made by `size` the first time: an answer the engine
 * keeps for a candle is sized once per budget asked, and the copies go with the answer.
 */
export function sizedCopy<S extends object>(answer: object, budget: number, size: () => S): S {
  let byBudget = copies.get(answer);
  if (byBudget === undefined) {
    byBudget = new Map();
    copies.set(answer, byBudget);
  }
  let copy = byBudget.get(budget) as S | undefined;
  if (copy === undefined) {
    copy = size();
    setBounded(byBudget, budget, copy, SIZED_PER_ANSWER);
  }
  return copy;
}
