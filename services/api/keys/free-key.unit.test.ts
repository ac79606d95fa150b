import { pino } from 'pino';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createMemoryCache } from '../../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../../adapters/event-store/memory.ts';
import { issueFreeKey } from './free-key.ts';

const DAY_MS = 86_400_000;

afterEach(() => {
  vi.useRealTimers();
});

describe('issueFreeKey', () => {
  it("keeps a network's spent budget past midnight by the cache's clock while this replica's is behind", async () => {
    const midnight = Math.floor(Date.now() / DAY_MS + 1) * DAY_MS;
    vi.useFakeTimers({ toFake: ['Date'] });
    // The shared cache's clock runs 30 s ahead of this replica's.
    const cache = createMemoryCache({ now: () => Date.now() + 30_000 });
    const deps = { store: new MemoryEventStore(), cache, perDay: 3, logger: pino({ level: 'silent' }) };
    const sign = () =>
      issueFreeKey(deps, {
        address: privateKeyToAccount(generatePrivateKey()).address,
        clientAddress: '198.51.100.30',
        nonce: 'n',
      });
    vi.setSystemTime(midnight - 40_000);
    for (let i = 0; i < 3; i++) expect(await sign()).toHaveProperty('issued');
    expect(await sign()).toMatchObject({ refused: 'budget', limit: 3, retryAfterSeconds: 40 });
    // Still the day before here, already the next by the cache: the day's count is still there.
    vi.setSystemTime(midnight - 20_000);
    expect(await sign()).toMatchObject({ refused: 'budget', retryAfterSeconds: 20 });
  });
});
