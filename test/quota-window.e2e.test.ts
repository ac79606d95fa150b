import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import type { RunningService } from '../services/service.ts';
import { issueServiceKey, startApiOnly } from './service-keys.ts';

/**
 * `_service.quota`'s own figures name one window, the one that binds: a free key over its daily cap
 * was told `{used: 2, total: 200, remaining: 0, resets_at: <the 1st of next month>}`, the day's
 * remaining beside the month's count, total and reset, so a client waited weeks instead of hours.
 */
describe('_service.quota describes the window that binds', () => {
  let service: RunningService;
  beforeAll(async () => {
    // Two served calls a day, then a refusal by the day's window.
    service = await startApiOnly({ PLAN_FREE_DAILY_CALLS: '2' });
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
  });
  afterAll(async () => {
    await service?.stop();
  });

  const call = async (key: string) => {
    const res = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: 'webhooks' }),
    });
    const body = (await res.json()) as { _service: unknown; code?: string; message?: string };
    return { res, body, quota: ServiceMeta.parse(body._service).quota! };
  };

  it('a free key over its daily cap: used, total, remaining and resets_at are the day’s', async () => {
    const { key } = await issueServiceKey(service, { plan: 'free', owner: 'quota-test' });
    const now = new Date();
    const tomorrow = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1));
    const nextMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));

    const first = await call(key);
    expect(first.res.status).toBe(200);
    // One of the day's two left is fewer than 199 of the month's: the day binds.
    expect(first.quota).toEqual({
      used: 1,
      total: 2,
      remaining: 1,
      resets_at: tomorrow.toISOString(),
      monthly: { used: 1, total: 200, remaining: 199, resets_at: nextMonth.toISOString() },
      daily: { used: 1, total: 2, remaining: 1, resets_at: tomorrow.toISOString() },
    });
    expect((await call(key)).res.status).toBe(200);

    const sent = Date.now();
    const refused = await call(key);
    const answered = Date.now();
    expect(refused.res.status).toBe(429);
    expect(refused.body).toMatchObject({
      code: 'QUOTA_EXHAUSTED',
      message: `the daily call quota of this key is used up (resets ${tomorrow.toISOString()})`,
    });
    expect(refused.quota).toEqual({
      used: 2,
      total: 2,
      remaining: 0,
      resets_at: tomorrow.toISOString(),
      monthly: { used: 2, total: 200, remaining: 198, resets_at: nextMonth.toISOString() },
      daily: { used: 2, total: 2, remaining: 0, resets_at: tomorrow.toISOString() },
    });
    // The block and Retry-After agree: both name the day's end.
    const resets = Date.parse(refused.quota.resets_at);
    const retryAfter = Number(refused.res.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((resets - answered) / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((resets - sent) / 1000));
    expect(refused.quota.used + refused.quota.remaining).toBe(refused.quota.total);
  });
});
