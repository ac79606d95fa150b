/**
 * Webhook delivery benchmarks, each against a baseline measured in the same run:
 *   1. signed deliveries/s through the whole path (event → store → relay → NATS → dispatcher →
 *      HTTPS receiver) against a bare undici POST loop to the same receiver at the same
 *      concurrency (target ratio ≥ 0.5);
 *   2. p99 latency of healthy endpoints with 10 % of the subscriptions dead (accepting, never
 *      answering) against none dead (target ratio ≤ 1.5).
 *   npx tsx bench/webhooks.bench.ts [--events=1000] [--only=throughput|latency]
 */
import { pathToFileURL } from 'node:url';
import { Agent, request } from 'undici';
import { appendVerdict, startWebhookStack, type WebhookStack } from '../test/webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../test/webhooks-receiver.ts';

export interface WebhookBenchResult {
  deliveriesPerSec?: number;
  barePostsPerSec?: number;
  throughputRatio?: number;
  p99HealthyMs?: number;
  p99WithDeadMs?: number;
  latencyRatio?: number;
}

const CONCURRENCY = 8;

function p99(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

async function withStack<T>(tls: { cert: string }, fn: (stack: WebhookStack) => Promise<T>): Promise<T> {
  const stack = await startWebhookStack({
    env: {
      WEBHOOK_ENDPOINT_CONCURRENCY: String(CONCURRENCY),
      WEBHOOK_TIMEOUT_MS: '30000',
      WEBHOOK_STUCK_AFTER_MS: '600000',
      WEBHOOK_MAX_PER_KEY: '100',
    },
    settings: { tls: { ca: tls.cert } },
  });
  try {
    return await fn(stack);
  } finally {
    await stack.close();
  }
}

async function barePosts(receiver: Receiver, ca: string, count: number): Promise<number> {
  const agent = new Agent({ connect: { ca }, connections: CONCURRENCY });
  const body = JSON.stringify({ event: 'trade_call', data: { coin: 'BENCH' } });
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < count) {
        const res = await request(receiver.url, {
          method: 'POST',
          dispatcher: agent,
          body,
          headers: { 'content-type': 'application/json' },
        });
        await res.body.text();
      }
    }),
  );
  const rate = count / ((performance.now() - started) / 1000);
  await agent.close();
  return rate;
}

async function throughput(tls: { key: string; cert: string }, events: number) {
  const receiver = await startReceiver(tls);
  try {
    const bare = await barePosts(receiver, tls.cert, events);
    receiver.received.length = 0;
    const full = await withStack(tls, async (stack) => {
      const key = await stack.issue();
      await stack.request('POST', '/api/webhooks', key, {
        url: receiver.url,
        events: ['trade_call'],
        assets: ['BENCH'],
      });
      const started = performance.now();
      for (let i = 0; i < events; i++)
        await appendVerdict(stack.store, { coin: 'BENCH', call: 'BUY', confidence: 50 });
      await receiver.waitFor(events, 300_000);
      return events / ((performance.now() - started) / 1000);
    });
    return { bare, full };
  } finally {
    await receiver.close();
  }
}

async function latency(
  tls: { key: string; cert: string },
  subs: number,
  dead: number,
  events: number,
): Promise<number> {
  const receivers = await Promise.all(Array.from({ length: subs }, () => startReceiver(tls)));
  for (let i = 0; i < dead; i++) receivers[i]!.behave = () => 'hang';
  try {
    return await withStack(tls, async (stack) => {
      const key = await stack.issue();
      for (const r of receivers) {
        await stack.request('POST', '/api/webhooks', key, {
          url: r.url,
          events: ['trade_call'],
          assets: ['LAT'],
        });
      }
      const sentAt = new Map<number, number>();
      for (let i = 0; i < events; i++) {
        sentAt.set(i, Date.now());
        await appendVerdict(stack.store, { coin: 'LAT', call: 'BUY', confidence: i % 101 });
        // A steady stream, not one burst: latency, not backlog, is measured.
        await new Promise((r) => setTimeout(r, 5));
      }
      const healthy = receivers.slice(dead);
      await Promise.all(healthy.map((r) => r.waitFor(events, 120_000)));
      const latencies: number[] = [];
      for (const r of healthy) {
        for (const got of r.received) {
          const created = Date.parse(JSON.parse(got.body).created_at);
          latencies.push(got.at - created);
        }
      }
      return p99(latencies);
    });
  } finally {
    for (const r of receivers) await r.close();
  }
}

export async function run(
  options: { events?: number; only?: 'throughput' | 'latency' } = {},
): Promise<WebhookBenchResult> {
  const events = options.events ?? 1_000;
  const tls = selfSignedCert();
  const result: WebhookBenchResult = {};
  const fmt = (n: number) => Math.round(n).toLocaleString('en');
  console.log(`webhooks, ${fmt(events)} deliveries, ${CONCURRENCY} connections per endpoint`);
  if (options.only !== 'latency') {
    const { bare, full } = await throughput(tls, events);
    result.deliveriesPerSec = full;
    result.barePostsPerSec = bare;
    result.throughputRatio = full / bare;
    console.log(`  full path (event → NATS → dispatcher → HTTPS)  ${fmt(full).padStart(8)} deliveries/s`);
    console.log(`  baseline bare undici POST loop                 ${fmt(bare).padStart(8)} posts/s`);
    console.log(
      `  ratio ${result.throughputRatio.toFixed(2)} (target >= 0.5: ${result.throughputRatio >= 0.5 ? 'ok' : 'MISSED'})`,
    );
  }
  if (options.only !== 'throughput') {
    const p99Healthy = await latency(tls, 20, 0, 100);
    const p99Dead = await latency(tls, 20, 2, 100);
    result.p99HealthyMs = p99Healthy;
    result.p99WithDeadMs = p99Dead;
    result.latencyRatio = p99Dead / Math.max(1, p99Healthy);
    console.log(`  healthy p99, 20 subscriptions, none dead        ${fmt(p99Healthy).padStart(8)} ms`);
    console.log(`  healthy p99, 20 subscriptions, 2 dead (10 %)    ${fmt(p99Dead).padStart(8)} ms`);
    console.log(
      `  ratio ${result.latencyRatio.toFixed(2)} (target <= 1.5: ${result.latencyRatio <= 1.5 ? 'ok' : 'MISSED'})`,
    );
  }
  return result;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const only = arg('only');
  if (only !== undefined && only !== 'throughput' && only !== 'latency') {
    console.error('--only takes throughput or latency');
    process.exit(2);
  }
  const events = arg('events');
  await run({ ...(events ? { events: Number(events) } : {}), ...(only ? { only } : {}) });
  process.exit(0);
}
