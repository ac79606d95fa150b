import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const tls = selfSignedCert();

/**
 * A retry's due time is a timer's wait in the dispatcher, and Node fires a wait past 2^31 - 1 ms
 * after 1 ms with a TimeoutOverflowWarning. The schedule's longest delay (24.8 days, the most the
 * setting takes) with the default ±20 % jitter drawn at its top is past that: the dispatcher
 * woke at once for it, twice per failure (with a ten-minute scan, as here, nothing else wakes it).
 * It waits at most a timer's range, and its scan then sets the next wake.
 */
describe('a retry due past a timer’s range', () => {
  let stack: WebhookStack;
  let r: Receiver;
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);

  beforeAll(async () => {
    process.on('warning', onWarning);
    stack = await startWebhookStack({
      bus: 'memory',
      env: {
        WEBHOOK_TICK_MS: '600000',
        WEBHOOK_RETRY_SCHEDULE: '0,2147483647',
        WEBHOOK_RETRY_JITTER: '0.2',
      },
      settings: { tls: { ca: tls.cert } },
    });
    r = await startReceiver(tls);
  });
  afterAll(async () => {
    process.off('warning', onWarning);
    vi.restoreAllMocks();
    await r?.close();
    await stack?.close();
  });

  it('is waited for, not woken for at once', async () => {
    r.behave = () => ({ status: 503 });
    const key = await stack.issue();
    const sub = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['RANGEA'],
    });
    expect(sub.status).toBe(201);
    // The jitter's sample at its top: the retry is due 2147483647 × 1.2 ms after the first attempt.
    vi.spyOn(Math, 'random').mockReturnValue(0.999_999);
    await appendVerdict(stack.store, { coin: 'RANGEA', call: 'BUY', confidence: 50 });
    await r.waitFor(1, 20_000);
    await expect
      .poll(async () => {
        const log = await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key);
        return log.body.deliveries[0]?.attempts.map((a: { outcome: string }) => a.outcome);
      })
      .toEqual(['failed']);
    vi.restoreAllMocks();
    const log = await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key);
    const next = Date.parse(log.body.deliveries[0].attempts[0].next_attempt_at);
    expect(next - Date.now()).toBeGreaterThan(2_147_483_647);
    // The dispatcher's scan of the recorded failure (which arms the wake) is done within a turn.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.filter((w) => w.startsWith('TimeoutOverflowWarning'))).toEqual([]);
    expect(r.received).toHaveLength(1);
  });
});
