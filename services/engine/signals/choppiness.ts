import type { Candle } from '../../../contracts/market.ts';
import { RollingExtreme, RollingMean } from './rolling-window.ts';

/**
 * Choppiness Index, defined as in `trading-signals` CHOP (true high/low include the previous
 * close): 100 · log10(ΣTR / (max true high − min true low)) / log10(n). The TR sum is a running
 * mean and the extremes are monotonic deques, so each update is O(1) instead of O(n).
 */
export class Choppiness {
  readonly period: number;
  readonly #trSum: RollingMean;
  readonly #highest: RollingExtreme;
  readonly #lowest: RollingExtreme;
  readonly #logPeriod: number;
  #previousClose: number | undefined;
  #value: number | null = null;

  constructor(period = 14) {
    if (period < 2) throw new RangeError('choppiness period must be at least 2');
    this.period = period;
    this.#trSum = new RollingMean(period);
    this.#highest = new RollingExtreme(period, 'max');
    this.#lowest = new RollingExtreme(period, 'min');
    this.#logPeriod = Math.log10(period);
  }

  update(candle: Pick<Candle, 'high' | 'low' | 'close'>): number | null {
    const prev = this.#previousClose;
    this.#previousClose = candle.close;
    if (prev === undefined) return null;
    const trueHigh = Math.max(candle.high, prev);
    const trueLow = Math.min(candle.low, prev);
    const meanTr = this.#trSum.push(trueHigh - trueLow);
    const hi = this.#highest.push(trueHigh);
    const lo = this.#lowest.push(trueLow);
    if (meanTr === null || hi === null || lo === null) return null;
    const range = hi - lo;
    this.#value = range === 0 ? 100 : (100 * Math.log10((meanTr * this.period) / range)) / this.#logPeriod;
    return this.#value;
  }

  get value(): number | null {
    return this.#value;
  }
}
