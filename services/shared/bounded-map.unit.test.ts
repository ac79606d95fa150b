import { describe, expect, it } from 'vitest';
import { setBounded } from './bounded-map.ts';

describe('setBounded', () => {
  it('drops the oldest entry when a new key would pass the limit', () => {
    const memo = new Map<string, number>();
    for (const [i, key] of ['a', 'b', 'c'].entries()) setBounded(memo, key, i, 2);
    expect([...memo]).toEqual([
      ['b', 1],
      ['c', 2],
    ]);
  });

  it('drops nothing when a known key is replaced at the limit', () => {
    const memo = new Map([
      ['a', 0],
      ['b', 1],
    ]);
    setBounded(memo, 'a', 9, 2);
    expect([...memo]).toEqual([
      ['a', 9],
      ['b', 1],
    ]);
  });
});
