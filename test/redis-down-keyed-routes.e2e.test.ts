import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPrivateRedis } from './redis-private.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * The keyed routes while Redis (the quota store of CACHE=redis) is down. A route that counts a call
 * against the key's quota (the tools, here /x402/*; /api/search and /api/chat) cannot debit it, so it
 * refuses: 503 quota_unavailable (QUOTA_UNAVAILABLE on /api), retryable. A keyed route that counts against no quota (GET /api/verdicts, an
 * export; GET /api/webhooks) needs nothing of Redis: it serves, its `_service.quota` null (the
 * figures could not be read). Refusing them would make a Redis outage an outage of routes that
 * spend nothing there.
 */
describe('keyed routes with Redis down', () => {
  let redis: Awaited<ReturnType<typeof startPrivateRedis>>;
  let running: TestService;
  let key: string;
  beforeAll(async () => {
    redis = await startPrivateRedis();
    running = await startTestService(['api'], {
      CACHE: 'redis',
      REDIS_URL: redis.url,
      REDIS_PREFIX: `redis-down-${randomUUID()}:`,
    });
    key = await running.issue('pro');
  }, 90_000);
  afterAll(async () => {
    await running?.stop();
    await redis?.stop().catch(() => {});
  });

  const call = (path: string, init: RequestInit = {}) =>
    fetch(`${running.service.url}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${key}`, ...(init.headers as Record<string, string>) },
    });
  const tool = () =>
    call('/x402/get_market_regime', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '4h' }),
    });

  it('refuses the metered tool 503 quota_unavailable, /api/search and /api/chat QUOTA_UNAVAILABLE, and serves /api/verdicts and /api/webhooks with quota null', async () => {
    // Up: all three served, with the key's live figures.
    expect((await tool()).status).toBe(200);
    const up = await call('/api/verdicts');
    expect(up.status).toBe(200);
    expect(JSON.parse(up.headers.get('x-service-meta')!).quota).not.toBeNull();

    await redis.stop();
    const refused = await tool();
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ code: 'quota_unavailable', retryable: true });

    const verdicts = await call('/api/verdicts');
    expect(verdicts.status).toBe(200);
    await verdicts.text();
    expect(JSON.parse(verdicts.headers.get('x-service-meta')!)).toMatchObject({
      auth: { outcome: 'OK', tier: 'pro' },
      quota: null,
    });
    const webhooks = await call('/api/webhooks');
    expect(webhooks.status).toBe(200);
    expect(((await webhooks.json()) as { _service: unknown })._service).toMatchObject({ quota: null });

    // /api/search and /api/chat count a call as the tools do: the key is known (auth OK), its
    // quota cannot be counted, so they refuse for the quota, not for the key.
    for (const [path, body] of [
      ['/api/search', { query: 'how is confidence computed' }],
      ['/api/chat', { question: 'what does squeeze mean?' }],
    ] as const) {
      const res = await call(path, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status, path).toBe(503);
      expect(res.headers.get('retry-after'), path).toBe('1');
      expect(await res.json(), path).toMatchObject({
        code: 'QUOTA_UNAVAILABLE',
        retryable: true,
        _service: { auth: { outcome: 'OK', tier: 'pro' }, quota: null },
      });
    }
  }, 120_000);
});
