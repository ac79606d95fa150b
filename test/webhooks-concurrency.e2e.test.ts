import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const LIMIT = 40;

function tally(statuses: number[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  return counts;
}

describe.runIf(reachable)('concurrent webhook management on one key', () => {
  let stack: WebhookStack;
  let deleted: Receiver;
  let live: Receiver;
  let store: LmdbEventStore;
  const dir = mkdtempSync(join(tmpdir(), 'wh-race-'));

  beforeAll(async () => {
    // The default store: reads and appends are real I/O, so concurrent commands interleave.
    store = await openLmdbEventStore({ path: dir });
    stack = await startWebhookStack({
      store,
      env: { WEBHOOK_MAX_PER_KEY: String(LIMIT) },
      settings: { tls: { ca: tls.cert } },
    });
    deleted = await startReceiver(tls);
    live = await startReceiver(tls);
  });
  afterAll(async () => {
    await deleted?.close();
    await live?.close();
    await stack?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('100 parallel creates then parallel deletes leave exactly what was asked, and nothing is delivered to the deleted', async () => {
    const key = await stack.issue();
    const body = { url: deleted.url, events: ['trade_call'], assets: ['SIGRACE'] };
    const creates = await Promise.all(
      Array.from({ length: 100 }, () => stack.request('POST', '/api/webhooks', key, body)),
    );
    // Every create is decided on the stream as it stands: the cap admits exactly LIMIT, the rest are refused.
    expect(tally(creates.map((r) => r.status))).toEqual({ 201: LIMIT, 409: 100 - LIMIT });
    for (const r of creates.filter((c) => c.status === 409)) {
      expect(r.body.code).toBe('SUBSCRIPTION_LIMIT');
    }
    const ids = creates.filter((r) => r.status === 201).map((r) => r.body.id as string);
    expect(new Set(ids).size).toBe(LIMIT);
    const listed = await stack.request('GET', '/api/webhooks', key);
    expect(listed.body.webhooks.map((w: { id: string }) => w.id).sort()).toEqual([...ids].sort());

    // Each subscription deleted twice at once: one delete removes it, the other finds it gone.
    const deletes = await Promise.all(
      [...ids, ...ids].map((id) => stack.request('DELETE', `/api/webhooks/${id}`, key)),
    );
    expect(tally(deletes.map((r) => r.status))).toEqual({ 200: LIMIT, 404: LIMIT });
    for (const r of deletes.filter((d) => d.status === 404)) expect(r.body.code).toBe('NOT_FOUND');
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks).toEqual([]);
    const left = Object.values(stack.api.runner.state.subscriptions.subs);
    expect(left.filter((s) => s.status === 'active')).toEqual([]);

    // The key is free again; its one live subscription is delivered to, the deleted ones are not.
    const sentinel = await stack.request('POST', '/api/webhooks', key, { ...body, url: live.url });
    expect(sentinel.status).toBe(201);
    await appendVerdict(stack.store, { coin: 'SIGRACE', call: 'BUY', confidence: 80 });
    await live.waitFor(1);
    expect(deleted.received).toEqual([]);
  });
});
