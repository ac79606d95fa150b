/**
 * Percentile rank of the newest value within the last `window` values. Keeps the window twice:
 * in arrival order (a ring, to know what leaves) and sorted (binary search for rank and median).
 * Cost per push: two binary searches plus two `splice` moves of at most `window` numbers — for
 * the default window of 200 that is a memmove of ≤ 1.6 kB, constant in the length of history.
 */
export class RollingPercentile {
  readonly window: number;
  readonly #ring: Float64Array;
  readonly #sorted: number[] = [];
  #head = 0;
  #count = 0;
  #last = Number.NaN;

  constructor(window: number) {
    if (!Number.isInteger(window) || window < 2) throw new RangeError('window must be an integer ≥ 2');
    this.window = window;
    this.#ring = new Float64Array(window);
  }

  push(value: number): void {
    if (this.#count === this.window) {
      const leaving = this.#ring[this.#head]!;
      this.#sorted.splice(lowerBound(this.#sorted, leaving), 1);
    } else {
      this.#count++;
    }
    this.#ring[this.#head] = value;
    this.#head = (this.#head + 1) % this.window;
    this.#sorted.splice(lowerBound(this.#sorted, value), 0, value);
    this.#last = value;
  }

  get size(): number {
    return this.#count;
  }

  /** Share (0–100) of window values at or below the newest value; ties count half. */
  get percentile(): number | null {
    if (this.#count === 0) return null;
    const below = lowerBound(this.#sorted, this.#last);
    const atOrBelow = upperBound(this.#sorted, this.#last);
    return (100 * (below + (atOrBelow - below) / 2)) / this.#count;
  }

  get median(): number | null {
    const n = this.#count;
    if (n === 0) return null;
    const mid = n >> 1;
    return n % 2 === 1 ? this.#sorted[mid]! : (this.#sorted[mid - 1]! + this.#sorted[mid]!) / 2;
  }
}

function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function upperBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
