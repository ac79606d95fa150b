/**
 * Percentile rank of the newest value within the last `window` values. Keeps the window twice:
 * in arrival order (a ring, to know what leaves) and sorted (binary search for rank and median).
 * Cost per push: two binary searches plus two in-place moves (`copyWithin`) of at most `window`
 * doubles — for the default window of 200 a memmove of ≤ 1.6 kB, constant in the length of
 * history, and no allocation (an array `splice` would allocate its removed-items array each time).
 */
export class RollingPercentile {
  readonly window: number;
  readonly #ring: Float64Array;
  /** The window's values ascending in [0, count). */
  readonly #sorted: Float64Array;
  #head = 0;
  #count = 0;
  #last = Number.NaN;

  constructor(window: number) {
    if (!Number.isInteger(window) || window < 2) throw new RangeError('window must be an integer ≥ 2');
    this.window = window;
    this.#ring = new Float64Array(window);
    this.#sorted = new Float64Array(window);
  }

  push(value: number): void {
    const sorted = this.#sorted;
    let n = this.#count;
    if (n === this.window) {
      const at = lowerBound(sorted, n, this.#ring[this.#head]!);
      sorted.copyWithin(at, at + 1, n);
      n--;
    } else {
      this.#count++;
    }
    this.#ring[this.#head] = value;
    this.#head = (this.#head + 1) % this.window;
    const at = lowerBound(sorted, n, value);
    sorted.copyWithin(at + 1, at, n);
    sorted[at] = value;
    this.#last = value;
  }

  get size(): number {
    return this.#count;
  }

  /** Share (0–100) of window values at or below the newest value; ties count half. */
  get percentile(): number | null {
    const n = this.#count;
    if (n === 0) return null;
    const below = lowerBound(this.#sorted, n, this.#last);
    const atOrBelow = upperBound(this.#sorted, n, this.#last);
    return (100 * (below + (atOrBelow - below) / 2)) / n;
  }

  get median(): number | null {
    const n = this.#count;
    if (n === 0) return null;
    const mid = n >> 1;
    return n % 2 === 1 ? this.#sorted[mid]! : (this.#sorted[mid - 1]! + this.#sorted[mid]!) / 2;
  }
}

function lowerBound(sorted: Float64Array, length: number, value: number): number {
  let lo = 0;
  let hi = length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function upperBound(sorted: Float64Array, length: number, value: number): number {
  let lo = 0;
  let hi = length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
