import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changeKeyPlan } from '../services/keys/key-commands.ts';
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

  /** The ends (ISO) of the UTC day and month that `t` falls in. */
  const endsOf = (t: number) => {
    const at = new Date(t);
    const [year, month, day] = [at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate()];
    return {
      day: new Date(Date.UTC(year, month, day + 1)).toISOString(),
      month: new Date(Date.UTC(year, month + 1, 1)).toISOString(),
    };
  };

  const call = async (key: string) => {
    const sent = Date.now();
    const res = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: 'webhooks' }),
    });
    const body = (await res.json()) as { _service: unknown; code?: string; message?: string };
    const answered = Date.now();
    const quota = ServiceMeta.parse(body._service).quota!;
    // The windows the call was counted in are those of a moment between sent and answered: either
    // side's, should the call straddle 00:00 UTC.
    const ends =
      [endsOf(sent), endsOf(answered)].find((e) => e.day === quota.daily?.resets_at) ?? endsOf(sent);
    return { res, body, quota, sent, answered, ends };
  };

  it('a free key over its daily cap: used, total, remaining and resets_at are the day’s', async () => {
    // Three calls within one UTC day: a day that ends in the next few seconds is waited out first.
    const untilMidnight = Date.parse(endsOf(Date.now()).day) - Date.now();
    if (untilMidnight < 5_000) await new Promise((resolve) => setTimeout(resolve, untilMidnight + 100));
    const { key } = await issueServiceKey(service, { plan: 'free', owner: 'quota-test' });

    const first = await call(key);
    const tomorrow = first.ends.day;
    /** The block after `used` calls of the day's 2 and the month's 200: the day's figures on top. */
    const dayBinds = (used: number) => {
      const daily = { used, total: 2, remaining: 2 - used, resets_at: tomorrow };
      return {
        ...daily,
        monthly: { used, total: 200, remaining: 200 - used, resets_at: first.ends.month },
        daily,
      };
    };
    expect(first.res.status).toBe(200);
    // One of the day's two left is fewer than 199 of the month's: the day binds.
    expect(first.quota).toEqual(dayBinds(1));
    expect((await call(key)).res.status).toBe(200);

    const refused = await call(key);
    const { sent, answered } = refused;
    expect(refused.ends).toEqual(first.ends);
    expect(refused.res.status).toBe(429);
    expect(refused.body).toMatchObject({
      code: 'QUOTA_EXHAUSTED',
      message: `the daily call quota of this key is used up (resets ${tomorrow})`,
    });
    expect(refused.quota).toEqual(dayBinds(2));
    // The block and Retry-After agree: both name the day's end.
    const resets = Date.parse(refused.quota.resets_at);
    const retryAfter = Number(refused.res.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((resets - answered) / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((resets - sent) / 1000));
    expect(refused.quota.used + refused.quota.remaining).toBe(refused.quota.total);
  });

  it('a key moved to a plan with a smaller day: the calls it made show as made, remaining 0, none more served', async () => {
    const untilMidnight = Date.parse(endsOf(Date.now()).day) - Date.now();
    if (untilMidnight < 5_000) await new Promise((resolve) => setTimeout(resolve, untilMidnight + 100));
    const issued = await issueServiceKey(service, { plan: 'starter', owner: 'plan-move' });
    // Three calls on starter (no day cap): one more than free's day of 2.
    for (let i = 0; i < 3; i++) expect((await call(issued.key)).res.status).toBe(200);
    const moved = await changeKeyPlan(
      service.adapters.eventStore,
      `apikey-${issued.keyId}`,
      issued.keyId,
      'free',
    );
    const keyed = service.components.find((c) => c.name === 'keyed-channel') as unknown as {
      registry: { waitFor(position: number): Promise<void> };
    };
    await keyed.registry.waitFor(moved);
    // `used` counts the calls made (on starter); the free day's cap binds with nothing left. Nothing
    // is debited past it: a second refusal shows the same count.
    for (let i = 0; i < 2; i++) {
      const refused = await call(issued.key);
      expect(refused.res.status).toBe(429);
      expect(refused.body.code).toBe('QUOTA_EXHAUSTED');
      const daily = { used: 3, total: 2, remaining: 0, resets_at: refused.ends.day };
      expect(refused.quota).toEqual({
        ...daily,
        monthly: { used: 3, total: 200, remaining: 197, resets_at: refused.ends.month },
        daily,
      });
    }
  });
});
