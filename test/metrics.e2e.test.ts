import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import { newEvent } from '../contracts/events.ts';
import { type RunningService, startService } from '../services/service.ts';
import { MCP_ACCEPT, mcpInitialize, mcpSessionHeaders } from './mcp-wire.ts';

/**
 * The series an operator needs beside the webhook ones (issue 13, item 9): quota debits and
 * refusals, rate-limit refusals, MCP sessions open, payments by state and the lag of every
 * projection, scraped from /metrics of a started service after calls that move each of them.
 */

const BOTH = MCP_ACCEPT;
const INIT = mcpInitialize('metrics');

/** The value of one sample, or undefined when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[3]);
  }
  return undefined;
}

describe('operator metrics on /metrics', () => {
  let dir: string;
  let service: RunningService;
  let session: string;

  const scrape = async () => (await fetch(`${service.url}/metrics`)).text();
  const callTool = (id: number) =>
    fetch(`${service.url}/mcp`, {
      method: 'POST',
      headers: mcpSessionHeaders(session),
      body: JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
      }),
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'metrics-'));
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      // Two served calls a day, then a refusal; ten requests a minute, then 429.
      PLAN_FREE_DAILY_CALLS: '2',
      RATE_LIMIT_ENABLED: 'true',
      RATE_LIMIT_ANONYMOUS: '10',
      RATE_LIMIT_TOOL_SHARE: '1',
      // Windows end on the clock: an hour's, so one gives the budget back mid-test only in a run that
      // straddles the full hour (about 1 in 1,000 for a few seconds' test).
      RATE_LIMIT_WINDOW_MS: '3600000',
    });
    service = await startService(config, ['api', 'engine', 'projections'], pino({ level: 'silent' }));
  });
  afterAll(async () => {
    await service?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('counts open MCP sessions', async () => {
    expect(sample(await scrape(), 'mcp_sessions_open')).toBe(0);
    const init = await fetch(`${service.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: BOTH },
      body: JSON.stringify(INIT),
    });
    expect(init.status).toBe(200);
    session = init.headers.get('mcp-session-id')!;
    expect(session).toBeTruthy();
    expect(sample(await scrape(), 'mcp_sessions_open')).toBe(1);
  });

  it('counts quota debits and refusals by plan and reason', async () => {
    const before = await scrape();
    expect(sample(before, 'quota_debits_total', { plan: 'free' }) ?? 0).toBe(0);
    const results: string[] = [];
    for (let id = 2; id <= 4; id++) results.push(await (await callTool(id)).text());
    // Two served, the third refused by the day's window (an MCP tool error, not a transport one).
    expect(results.filter((r) => r.includes('"isError":true'))).toHaveLength(1);
    const after = await scrape();
    expect(sample(after, 'quota_debits_total', { plan: 'free' })).toBe(2);
    expect(sample(after, 'quota_refusals_total', { plan: 'free', reason: 'daily' })).toBe(1);
  });

  it('drops the session from the gauge when it is closed', async () => {
    const closed = await fetch(`${service.url}/mcp`, {
      method: 'DELETE',
      headers: { 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
    });
    expect(closed.status).toBeLessThan(300);
    await expect.poll(async () => sample(await scrape(), 'mcp_sessions_open')).toBe(0);
  });
  it('reports payments by state, folded from the log', async () => {
    const ref = (n: number) => ({
      nonce: `0x${String(n).padStart(64, '0')}`,
      network: 'eip155:84532',
      asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    });
    const payer = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
    const authorized = (n: number) =>
      newEvent('PaymentAuthorized', {
        ...ref(n),
        payer,
        payTo: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
        amount: '1000',
        resource: '/x402/get_verdict',
        x402Version: 2,
        validAfter: '0',
        validBefore: '9999999999',
        requestId: `req-${n}`,
      });
    const store = service.adapters.eventStore;
    await store.append('payment-metrics-1', [
      authorized(1),
      newEvent('PaymentSettled', { ...ref(1), payer, amount: '1000', txHash: `0x${'ab'.repeat(32)}` }),
    ]);
    await store.append('payment-metrics-2', [
      authorized(2),
      newEvent('PaymentSettlementPending', { ...ref(2), submittedAt: new Date().toISOString() }),
    ]);
    await store.append('payment-metrics-3', [authorized(3)]);
    await expect.poll(async () => sample(await scrape(), 'payments', { state: 'settled' })).toBe(1);
    const text = await scrape();
    expect(sample(text, 'payments', { state: 'pending' })).toBe(1);
    expect(sample(text, 'payments', { state: 'authorized' })).toBe(1);
    expect(sample(text, 'payments', { state: 'failed' })).toBe(0);
  });

  it('reports the lag of every projection runner, not only the projections role', async () => {
    const text = await scrape();
    // key-registry belongs to the api role; event-stats and payment-states to the projections role.
    for (const projection of ['key-registry', 'event-stats', 'payment-states']) {
      const lag = sample(text, 'projection_lag_events', { projection });
      expect(lag, `${projection} has no lag series`).toBeDefined();
      expect(lag).toBeGreaterThanOrEqual(0);
    }
    // Caught up by now: a few events behind at most, never the whole log.
    const head = await service.adapters.eventStore.headPosition();
    expect(sample(text, 'projection_lag_events', { projection: 'key-registry' })).toBeLessThan(
      Math.max(head, 1),
    );
  });

  it('counts rate-limit refusals by tier and channel', async () => {
    let refused = 0;
    // Five requests are spent already (initialize, three calls, close): the budget of ten runs out here.
    for (let i = 0; i < 8; i++) {
      const res = await fetch(`${service.url}/api/keys/nonce`);
      await res.arrayBuffer();
      if (res.status === 429) refused += 1;
    }
    expect(refused).toBeGreaterThanOrEqual(1);
    const text = await scrape();
    expect(sample(text, 'rate_limit_refusals_total', { tier: 'anonymous', channel: 'http' })).toBe(refused);
  });
});
