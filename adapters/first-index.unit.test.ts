import { describe, expect, it } from 'vitest';
import { firstIndex } from './first-index.ts';

describe('firstIndex', () => {
  it('finds the first element past a bound in a sorted array, ties counted as not past', () => {
    const xs = [1, 3, 3, 3, 7, 9];
    const past = (t: number) => firstIndex(xs.length, (i) => xs[i]! > t);
    expect(past(0)).toBe(0);
    expect(past(1)).toBe(1);
    expect(past(3)).toBe(4);
    expect(past(8)).toBe(5);
    expect(past(9)).toBe(6);
  });

  it('answers the length when nothing is past and 0 for an empty range, asking only inside it', () => {
    const asked: number[] = [];
    expect(
      firstIndex(5, (i) => {
        asked.push(i);
        return false;
      }),
    ).toBe(5);
    expect(asked.every((i) => i >= 0 && i < 5)).toBe(true);
    expect(firstIndex(0, () => true)).toBe(0);
  });

  it('agrees with a linear scan on every bound over random sorted arrays', () => {
    let seed = 7;
    const next = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed;
    };
    for (let round = 0; round < 50; round++) {
      const xs = Array.from({ length: next() % 40 }, () => next() % 20).sort((a, b) => a - b);
      for (let t = -1; t <= 21; t++) {
        const linear = xs.findIndex((x) => x > t);
        expect(firstIndex(xs.length, (i) => xs[i]! > t)).toBe(linear === -1 ? xs.length : linear);
      }
    }
  });
});
