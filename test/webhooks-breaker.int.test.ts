import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

interface Attempt {
  attempt: number | null;
  attempted_at: string;
  sent_at: string | null;
  queued_ms: number | null;
  outcome: string;
  error: string | null;
}

describe.runIf(reachable)('an endpoint that accepts and never answers', () => {
  const registry = new Registry();
  const metric = async (name: string, labels: string) => {
    const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
    return line === undefined ? null : Number(line.split(' ').at(-1));
  };
  let stack: WebhookStack;
  let hung: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: {
        WEBHOOK_ENDPOINT_CONCURRENCY: '1',
        WEBHOOK_TIMEOUT_MS: '300',
        WEBHOOK_BREAKER_TIMEOUTS: '2',
        WEBHOOK_RETRY_SCHEDULE: '0,1500,60000',
        WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '100',
      },
      settings: { tls: { ca: tls.cert } },
      registry,
    });
    hung = await startReceiver(tls);
    hung.behave = () => 'hang';
  });
  afterAll(async () => {
    await hung?.close();
    await stack?.close();
  });

  it('is cut off by its breaker, probed on the retry schedule, and served again once it answers', async () => {
    const key = await stack.issue();
    const res = await stack.request('POST', '/api/webhooks', key, {
      url: hung.url,
      events: ['trade_call'],
      assets: ['HUNG'],
    });
    expect(res.status).toBe(201);
    for (let i = 0; i < 10; i++)
      await appendVerdict(stack.store, { coin: 'HUNG', call: 'BUY', confidence: 50 + i });
    // Two requests time out (300 ms each, one at a time); then the breaker holds the rest back.
    await hung.waitFor(2);
    await new Promise((resolve) => setTimeout(resolve, 900));
    expect(hung.received).toHaveLength(2);

    const log = await stack.request('GET', `/api/webhooks/${res.body.id}/deliveries`, key);
    const first: Attempt[] = log.body.deliveries.map((d: { attempts: Attempt[] }) => d.attempts[0]);
    const sent = first.filter((a) => a.sent_at !== null);
    const held = first.filter((a) => a.sent_at === null);
    expect(sent).toHaveLength(2);
    expect(sent.every((a) => /^timeout/.test(a.error ?? ''))).toBe(true);
    // The second waited in the queue behind the first: queue time and send time are apart.
    expect(Math.max(...sent.map((a) => a.queued_ms!))).toBeGreaterThanOrEqual(250);
    expect(held).toHaveLength(8);
    // Held, not failed, and not numbered: they sent nothing and use up no attempt of the schedule.
    expect(
      held.every((a) => a.outcome === 'held' && a.attempt === null && /circuit open/.test(a.error ?? '')),
    ).toBe(true);
    expect(sent.every((a) => a.outcome === 'failed' && a.attempt === 1)).toBe(true);
    // The 8 first attempts held (exactly, from the log above); on a loaded machine their retries
    // (1.5 s on) may come due and be held again before this reads the counter.
    expect(await metric('webhook_delivery_outcomes_total', 'outcome="held"')).toBeGreaterThanOrEqual(8);
    // The 2 timed-out first attempts, and any probe on the schedule that timed out meanwhile.
    expect(await metric('webhook_delivery_outcomes_total', 'outcome="failed"')).toBeGreaterThanOrEqual(2);
    expect(await metric('webhook_delivery_attempts_total', 'trigger="event"')).toBe(10);
    expect(await metric('webhook_endpoints', 'breaker_state="open"')).toBe(1);
    expect(await metric('webhook_subscriptions', 'status="active"')).toBe(1);

    // It answers again: the probe on the schedule closes the breaker and everything goes out.
    hung.behave = () => ({ status: 200 });
    // Generous: only a condition that never comes ends this wait (the machine may be under load 10-30).
    const deadline = Date.now() + 120_000;
    for (;;) {
      const now = await stack.request('GET', `/api/webhooks/${res.body.id}/deliveries`, key);
      if (now.body.deliveries.every((d: { status: string }) => d.status === 'succeeded')) break;
      if (Date.now() > deadline)
        throw new Error(JSON.stringify(now.body.deliveries.map((d: { status: string }) => d.status)));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(hung.received.length).toBeGreaterThanOrEqual(12);
    expect(await metric('webhook_delivery_outcomes_total', 'outcome="succeeded"')).toBe(10);
    expect(await metric('webhook_endpoints', 'breaker_state="open"')).toBe(0);
    expect(await metric('webhook_endpoint_queue_depth', 'breaker_state="closed"')).toBe(0);
    expect((await registry.metrics()).split('\n')).toContain('webhook_queue_kept_bytes 0');
    expect((await registry.metrics()).includes('webhook_delivery_latency_seconds_count')).toBe(true);
  });
});

describe.runIf(reachable)('a hung endpoint is disabled by time since its last success', () => {
  let stack: WebhookStack;
  let hung: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: {
        WEBHOOK_ENDPOINT_CONCURRENCY: '1',
        WEBHOOK_TIMEOUT_MS: '200',
        WEBHOOK_BREAKER_TIMEOUTS: '1',
        WEBHOOK_RETRY_SCHEDULE: '0,400,60000',
        WEBHOOK_DISABLE_AFTER_MS: '1500',
        WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '100',
      },
      settings: { tls: { ca: tls.cert } },
    });
    hung = await startReceiver(tls);
    hung.behave = () => 'hang';
  });
  afterAll(async () => {
    await hung?.close();
    await stack?.close();
  });

  it('however few requests the breaker lets through', async () => {
    const key = await stack.issue();
    const res = await stack.request('POST', '/api/webhooks', key, {
      url: hung.url,
      events: ['trade_call'],
      assets: ['HUNGT'],
    });
    await appendVerdict(stack.store, { coin: 'HUNGT', call: 'BUY', confidence: 50 });
    await hung.waitFor(1);
    await new Promise((resolve) => setTimeout(resolve, 1_800));
    // Held by the open breaker: recorded as a failure, which is when the rule is checked.
    await appendVerdict(stack.store, { coin: 'HUNGT', call: 'BUY', confidence: 51 });
    // Generous: only a condition that never comes ends this wait (the machine may be under load 10-30).
    const deadline = Date.now() + 120_000;
    let sub: { status: string; disabled_reason: string | null } | undefined;
    while (Date.now() < deadline) {
      sub = (await stack.request('GET', '/api/webhooks?status=all', key)).body.webhooks[0];
      if (sub?.status === 'disabled') break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(sub).toMatchObject({
      status: 'disabled',
      disabled_reason: expect.stringMatching(/no successful delivery since/),
    });
    // One first attempt and one probe reached it; nothing else was sent.
    expect(hung.received.length).toBeLessThanOrEqual(2);
    expect(res.status).toBe(201);
  });
});
