/**
 * O(1) streaming window pieces that `trading-signals` 8 lacks in constant time: its SMA,
 * CHOP and channel extremes re-scan the whole window on every update (O(period)), which
 * matters for SMA(200) across 220 markets. Each class here does constant (amortised) work
 * per value and keeps only the window, never the history.
 */

/** Mean of the last `period` values with a running sum. */
export class RollingMean {
  readonly period: number;
  readonly #values: Float64Array;
  #count = 0;
  #head = 0;
  #sum = 0;

  constructor(period: number) {
    if (!Number.isInteger(period) || period < 1) throw new RangeError(`period must be a positive integer`);
    this.period = period;
    this.#values = new Float64Array(period);
  }

  push(value: number): number | null {
    const old = this.#values[this.#head]!;
    this.#values[this.#head] = value;
    this.#head = (this.#head + 1) % this.period;
    if (this.#count < this.period) {
      this.#count++;
      this.#sum += value;
    } else {
      this.#sum += value - old;
    }
    // Re-add the window once per lap: amortised O(1), and float drift never outlives a lap.
    if (this.#head === 0) {
      let s = 0;
      for (let i = 0; i < this.#count; i++) s += this.#values[i]!;
      this.#sum = s;
    }
    return this.value;
  }

  get isStable(): boolean {
    return this.#count === this.period;
  }

  get value(): number | null {
    return this.#count === this.period ? this.#sum / this.period : null;
  }
}

/**
 * Highest (or lowest) of the last `period` values: a monotonic deque, amortised O(1) per push
 * because each value enters and leaves the deque once.
 */
export class RollingExtreme {
  readonly period: number;
  readonly #sign: 1 | -1;
  readonly #values: Float64Array;
  readonly #ticks: Float64Array;
  #start = 0;
  #length = 0;
  #tick = 0;

  constructor(period: number, kind: 'max' | 'min') {
    if (!Number.isInteger(period) || period < 1) throw new RangeError(`period must be a positive integer`);
    this.period = period;
    this.#sign = kind === 'max' ? 1 : -1;
    this.#values = new Float64Array(period + 1);
    this.#ticks = new Float64Array(period + 1);
  }

  push(value: number): number | null {
    const cap = this.period + 1;
    const v = this.#sign * value;
    while (this.#length > 0 && this.#values[(this.#start + this.#length - 1) % cap]! <= v) this.#length--;
    const at = (this.#start + this.#length) % cap;
    this.#values[at] = v;
    this.#ticks[at] = this.#tick;
    this.#length++;
    while (this.#ticks[this.#start]! <= this.#tick - this.period) {
      this.#start = (this.#start + 1) % cap;
      this.#length--;
    }
    this.#tick++;
    return this.value;
  }

  get isStable(): boolean {
    return this.#tick >= this.period;
  }

  get value(): number | null {
    return this.isStable ? this.#sign * this.#values[this.#start]! : null;
  }
}

/** Value `lag` pushes ago (lag 1 = the previous value). */
export class Lagged {
  readonly #values: Float64Array;
  #count = 0;
  #head = 0;

  constructor(readonly lag: number) {
    this.#values = new Float64Array(lag + 1);
  }

  push(value: number): void {
    this.#values[this.#head] = value;
    this.#head = (this.#head + 1) % this.#values.length;
    this.#count++;
  }

  /** The value pushed `lag` pushes before the latest one, or null if there is none yet. */
  get value(): number | null {
    if (this.#count <= this.lag) return null;
    return this.#values[this.#head % this.#values.length]!;
  }
}
