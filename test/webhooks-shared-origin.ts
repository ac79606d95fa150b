import type { Registry } from 'prom-client';
import { expect } from 'vitest';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

/**
 * What the suites of several API keys on one receiver origin share (tenant isolation, the origin
 * cap): a webhook stack on the memory bus that trusts an HTTPS receiver of its own, and the
 * delivery log as those suites read it.
 */
const tls = selfSignedCert();

export interface Attempt {
  attempt: number | null;
  outcome: string;
  error: string | null;
}
export interface Delivery {
  status: string;
  attempts: Attempt[];
}

/**
 * A receiver's hung request holds its slot for the whole case: a timeout no case outlasts on a
 * busy host, never reported stuck, and failures that never disable the subscription.
 */
export const HUNG_HOLDS = {
  WEBHOOK_TIMEOUT_MS: '20000',
  WEBHOOK_STUCK_AFTER_MS: '60000',
  WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '100',
};

/** A stack with `env` and an HTTPS receiver it trusts (the receiver answers 200 until told otherwise). */
export async function stackBesideReceiver(options: {
  env: Record<string, string>;
  registry?: Registry;
}): Promise<{ stack: WebhookStack; receiver: Receiver }> {
  const stack = await startWebhookStack({
    bus: 'memory',
    env: options.env,
    settings: { tls: { ca: tls.cert } },
    ...(options.registry ? { registry: options.registry } : {}),
  });
  return { stack, receiver: await startReceiver(tls) };
}

/** One subscription per key on the receiver's origin (a path each), taking the key's own coin. */
export async function tenants(stack: WebhookStack, receiver: Receiver, coins: string[]) {
  const origin = new URL(receiver.url).origin;
  const logs: (() => Promise<Delivery[]>)[] = [];
  for (const coin of coins) {
    const key = await stack.issue(`tenant-${coin}`);
    const sub = await stack.request('POST', '/api/webhooks', key, {
      url: `${origin}/${coin.toLowerCase()}/hook`,
      events: ['trade_call'],
      assets: [coin],
    });
    expect(sub.status).toBe(201);
    logs.push(
      async () =>
        (await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key)).body.deliveries,
    );
  }
  return logs;
}

/** Another HTTPS receiver the stacks above trust, on an origin of its own (another port). */
export function anotherReceiver(): Promise<Receiver> {
  return startReceiver(tls);
}

/** The receiver first: its sockets end the hung requests, so the dispatcher stops at once. */
export async function closeBoth(
  stack: WebhookStack | undefined,
  receiver: Receiver | undefined,
): Promise<void> {
  await receiver?.close();
  await stack?.close();
}

/** A delivery's latest attempt (`pending`: in flight, or queued). */
export const latest = (d: Delivery) => d.attempts[d.attempts.length - 1]!;
/** Every one of `n` deliveries has its latest attempt's outcome in. */
export const settled = (n: number) => (d: Delivery[]) =>
  d.length === n && d.every((x) => x.attempts.length > 0 && latest(x).outcome !== 'pending');
