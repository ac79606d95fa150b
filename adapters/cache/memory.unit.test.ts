import { describe, expect, it } from 'vitest';
import { describeCacheContract } from './contract.ts';
import { MemoryCache } from './memory.ts';

describeCacheContract('memory', { open: async () => new MemoryCache() });

describe('memory cache on a controlled clock', () => {
  const clock = (start: number) => {
    let now = start;
    return { now: () => now, advance: (ms: number) => (now += ms) };
  };

  it('a window counts up to its expiresAt and is gone one millisecond later, as on Redis', async () => {
    const time = clock(1_000_000);
    const cache = new MemoryCache({ now: time.now });
    const window = { key: 'quota:m', limit: 3, expiresAt: 1_060_000 };
    await cache.debitWindows([window], 3);
    time.advance(60_000);
    expect(await cache.debitWindows([window], 1)).toEqual({ ok: false, counts: [3], refusedBy: 0 });
    time.advance(1);
    expect(await cache.readWindows([window.key])).toEqual([0]);
    expect(await cache.debitWindows([{ ...window, expiresAt: 1_120_000 }], 1)).toEqual({
      ok: true,
      counts: [1],
      refusedBy: null,
    });
    await cache.close();
  });

  it('a TTL counts from the moment of the set', async () => {
    const time = clock(5_000);
    const cache = new MemoryCache({ now: time.now });
    await cache.set('k', 'v', { ttlMs: 100 });
    time.advance(100);
    expect(await cache.get('k')).toBe('v');
    expect(await cache.setIfAbsent('k', 'w')).toBe(false);
    time.advance(1);
    expect(await cache.get('k')).toBeNull();
    expect(await cache.setIfAbsent('k', 'w')).toBe(true);
    await cache.close();
  });

  it('the sweeper drops expired entries that nobody reads again', async () => {
    const time = clock(0);
    const cache = new MemoryCache({ now: time.now, sweepIntervalMs: 10 });
    const entries = (cache as unknown as { entries: Map<string, unknown> }).entries;
    await cache.set('a', '1', { ttlMs: 5 });
    await cache.set('b', '2');
    time.advance(6);
    await expect.poll(() => [...entries.keys()]).toEqual(['b']);
    await cache.close();
  });
});
