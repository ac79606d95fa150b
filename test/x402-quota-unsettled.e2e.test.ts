import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * A key whose daily quota is used up, on the embedded defaults (no facilitator: a paid retry is
 * 503 facilitator_not_configured): the 429 of a pay-per-call route must not send it to pay, as
 * the MCP tool error on the same service does not; it says what does work.
 */
describe('quota_exhausted on /x402/* where no facilitator settles', () => {
  let running: TestService;
  let url: string;

  beforeAll(async () => {
    running = await startTestService(['api'], { PLAN_FREE_DAILY_CALLS: '1' });
    url = running.service.url;
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('says to wait for the reset or use a larger plan, not to pay', async () => {
    const key = await running.issue('free');
    await expect.poll(async () => (await call(key)).status).toBe(429); // the first is served, then refused
    const refused = await call(key);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    const body = (await refused.json()) as { code: string; message: string };
    expect(body.code).toBe('quota_exhausted');
    expect(body.message).toMatch(
      /^the daily quota of this key is used up \(resets [^)]+\); wait for the reset, or use a key of a larger plan/,
    );
    expect(body.message).not.toMatch(/pay for this call/);

    // What the message no longer offers indeed fails here.
    const paid = await fetch(`${url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-payment': Buffer.from('{}').toString('base64') },
      body: JSON.stringify({ coin: 'BTC' }),
    });
    expect(paid.status).not.toBe(200);
  });

  const call = (key: string) =>
    fetch(`${url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ coin: 'BTC' }),
    });
});
