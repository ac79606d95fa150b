import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { newEventId } from './event-id.ts';

describe('newEventId', () => {
  it('makes version-7 UUIDs that the envelope schema accepts', () => {
    const id = newEventId();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(z.uuid().safeParse(id).success).toBe(true);
  });

  it('sorts ids in the order they were made, within a millisecond and across milliseconds', async () => {
    const ids: string[] = [];
    // Thousands in a row share milliseconds; the waits make sure several milliseconds pass too.
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 2_000; i++) ids.push(newEventId());
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    // Pairwise, so that a failure names the first pair out of order instead of diffing 10,000 ids.
    const outOfOrder = ids.findIndex((id, i) => i > 0 && !(ids[i - 1]! < id));
    expect(outOfOrder, `${ids[outOfOrder - 1]} then ${ids[outOfOrder]}`).toBe(-1);
    // Its first 48 bits are the time it was made, in Unix milliseconds.
    const made = Number.parseInt(ids.at(-1)!.replace('-', '').slice(0, 12), 16);
    expect(Math.abs(made - Date.now())).toBeLessThan(5_000);
  });

  it('keeps ids in order when the clock steps back', () => {
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now');
    try {
      clock.mockReturnValue(now + 1_000);
      const before = Array.from({ length: 3 }, () => newEventId());
      clock.mockReturnValue(now);
      const after = Array.from({ length: 3 }, () => newEventId());
      const ids = [...before, ...after];
      expect([...ids].sort()).toEqual(ids);
      expect(new Set(ids).size).toBe(ids.length);
    } finally {
      clock.mockRestore();
    }
  });

  it('gives every id random bits of its own, across refills of its pool of random bytes', () => {
    // 2,000 ids use the pool up several times over: a pool served twice, or not refilled, repeats
    // the 40 random bits that end every id (its last five bytes; the byte before mixes in the counter).
    const tails = new Set(Array.from({ length: 2_000 }, () => newEventId().slice(26)));
    expect(tails.size).toBe(2_000);
  });
});
