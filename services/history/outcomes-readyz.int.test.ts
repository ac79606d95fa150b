import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { VenueUnavailableError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { recordHistory } from '../../test/history-harness.ts';
import { altnameError, PRIVATE_WORDS, readyzApp } from '../../test/readyz-app.ts';
import { Readiness } from '../shared/readiness.ts';
import { pendingOutcomesProjection } from './projections.ts';
import { OutcomeResolver, outcomesCheck } from './resolver.ts';

describe('processor:history-outcomes on /readyz, after the feed refused a fetch', () => {
  it("shows the refusal's reason, never the bare host its words name; the log has the words", async () => {
    const altname = altnameError();
    const { store, feed } = await recordHistory({ steps: 2, settleHours: 30 });
    // The real replay feed, whose candle fetches the venue's TLS refuses as the live feed tells it.
    const refusing = new Proxy(feed, {
      get(target, prop) {
        if (prop === 'candles') {
          return async (exchange: Parameters<MarketFeed['candles']>[0]) => {
            throw new VenueUnavailableError(exchange, altname.message, { cause: altname });
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const quiet = pino({ level: 'silent' });
    const pending = new ProjectionRunner(store, new MemoryProjectionStore(), pendingOutcomesProjection, {
      logger: quiet,
    });
    await pending.start();
    await pending.waitFor(await store.headPosition());
    const resolver = new OutcomeResolver({
      store,
      feed: refusing,
      pending,
      logger: quiet,
      maxLag: 1_000,
      intervalMs: 1_000,
      concurrency: 1,
      clock: () => 1_000_000,
    });
    expect(await resolver.resolveDue()).toBe(0);
    expect(resolver.failedFetches).toBeGreaterThan(0);

    const readiness = new Readiness();
    readiness.add(
      'processor:history-outcomes',
      outcomesCheck(() => resolver, pending),
    );
    const { app, logged } = await readyzApp(readiness);
    try {
      const res = await app.inject({ method: 'GET', url: '/readyz' });
      expect(res.statusCode).toBe(200);
      expect(res.json().checks['processor:history-outcomes']).toMatchObject({
        ok: true,
        failedFetches: resolver.failedFetches,
        lastError: 'TLS certificate refused',
      });
      // A passing check: the reason is its lastError, no failure's detail beside it.
      expect(res.json().checks['processor:history-outcomes']).not.toHaveProperty('detail');
      for (const word of PRIVATE_WORDS) expect(res.body).not.toContain(word);
      expect(logged()).toHaveLength(1);
      expect(logged()[0]).toMatchObject({ check: 'processor:history-outcomes' });
      expect(logged()[0]?.err?.message).toContain('db-internal');
    } finally {
      await app.close();
      await pending.stop();
    }
  });
});
