/**
 * Binary search: the first index in [0, length) at which `past` holds, or `length` when none does.
 * `past` must be false up to some index and true from it on, as "past the bound" is along a sorted
 * array (candles by time, events by position, runs by revision).
 */
export function firstIndex(length: number, past: (index: number) => boolean): number {
  let lo = 0;
  let hi = length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (past(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
