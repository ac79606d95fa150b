import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../../test/webhooks-receiver.ts';
import { deliveryStream, sequenceStream } from './delivery-log-fold.ts';
import { DeliveryWorker } from './delivery-worker.ts';
import { SecretBox } from './secret-box.ts';
import { parseCidrList } from './ssrf/address-policy.ts';
import { guardedAgent } from './ssrf/guarded-agent.ts';
import { createSubscription } from './subscription-commands.ts';
import { findSubscription } from './subscription-fold.ts';
import { webhookProjection } from './webhook-projection.ts';

/** A memory store whose outcome appends (DeliverySucceeded/Failed) wait until released. */
class HeldOutcomes extends MemoryEventStore {
  held = 0;
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;

  hold(): void {
    this.gate = new Promise((resolve) => {
      this.open = resolve;
    });
  }

  release(): void {
    this.open?.();
    this.gate = null;
  }

  override async append(
    stream: string,
    events: NewEvent[],
    options?: Parameters<MemoryEventStore['append']>[2],
  ) {
    if (this.gate && events.some((e) => e.type === 'DeliverySucceeded' || e.type === 'DeliveryFailed')) {
      this.held++;
      await this.gate;
    }
    return super.append(stream, events, options);
  }
}

const tls = selfSignedCert();
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup<S extends EventStore = HeldOutcomes>(endpointConcurrency: number, given?: S) {
  const store = (given ?? new HeldOutcomes()) as S;
  const runner = new ProjectionRunner(store, new MemoryProjectionStore(), webhookProjection);
  await runner.start();
  const receiver: Receiver = await startReceiver(tls);
  const agent = guardedAgent({
    addresses: { allow: parseCidrList('127.0.0.1/32') },
    connectTimeoutMs: 2_000,
    connectionsPerOrigin: endpointConcurrency,
    tls: { ca: tls.cert },
  });
  cleanups.push(async () => {
    if (store instanceof HeldOutcomes) store.release();
    await runner.stop();
    await agent.close();
    await receiver.close();
  });
  const secrets = new SecretBox(randomBytes(32).toString('hex'));
  const worker = new DeliveryWorker({
    store,
    runner,
    secrets,
    agent,
    settings: {
      retry: { schedule: [0, 60_000], jitter: 0, retryAfterMaxMs: 60_000 },
      timeoutMs: 5_000,
      disableAfterFailedDeliveries: 100,
      disableAfterMs: 86_400_000,
      endpointConcurrency,
      endpointQueueLimit: 100,
      breakerTimeouts: 3,
    },
    logger: pino({ level: 'silent' }),
  });
  const created = await createSubscription(store, {
    keyId: 'key-1',
    request: { url: receiver.url, events: ['trade_call'] } as never,
    url: receiver.url,
    secrets,
    maxPerKey: 5,
  });
  await runner.waitFor(created.position);
  const sub = findSubscription(runner.state.subscriptions, created.subscriptionId)!;
  const claim = (n: number) =>
    worker.claim({
      deliveryId: `d-${n}`,
      subscription: sub,
      eventId: `ev-${n}`,
      event: 'trade_call',
      attempt: 1,
      trigger: 'event',
      body: JSON.stringify({ n }),
      expected: 'no_stream',
    });
  return { store, runner, receiver, worker, claim, sub };
}

describe('DeliveryWorker', () => {
  it('frees the endpoint slot once the response is in, before the outcome is recorded', async () => {
    const { store, receiver, worker, claim } = await setup(1);
    store.hold();
    const first = worker.submit((await claim(1))!);
    const second = worker.submit((await claim(2))!);
    // One slot: the second request can only go out if the first one's slot was released while
    // its outcome append is still held.
    await receiver.waitFor(2, 10_000);
    expect(store.held).toBeGreaterThanOrEqual(1);
    expect(worker.owned.has('d-1')).toBe(true);
    let drained = false;
    const draining = worker.drained().then(() => {
      drained = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(drained).toBe(false);
    store.release();
    expect((await first).ok).toBe(true);
    expect((await second).ok).toBe(true);
    await draining;
    expect(worker.owned.size).toBe(0);
    const types = async (id: string) => (await store.readStream(deliveryStream(id))).map((e) => e.type);
    expect(await types('d-1')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
    // The second waited for the slot: queued first, claimed at its turn, just before its send.
    expect(await types('d-2')).toEqual(['DeliveryQueued', 'DeliveryAttempted', 'DeliverySucceeded']);
  });

  it('still records a failed attempt with its next retry, and rejects when the store fails', async () => {
    const { store, receiver, worker, claim } = await setup(2);
    receiver.behave = () => ({ status: 503 });
    const result = await worker.submit((await claim(1))!);
    expect(result).toMatchObject({ ok: false, status: 503 });
    const events = await store.readStream(deliveryStream('d-1'));
    expect(events.map((e) => e.type)).toEqual(['DeliveryAttempted', 'DeliveryFailed']);
    expect((events[1]!.data as { nextAttemptAt: string | null }).nextAttemptAt).not.toBeNull();

    const job = (await claim(2))!;
    const append = store.append.bind(store);
    store.append = async (stream, evs, options) => {
      if (evs.some((e) => e.type === 'DeliveryFailed')) throw new Error('store down');
      return append(stream, evs, options);
    };
    await expect(worker.submit(job)).rejects.toThrow('store down');
    await worker.drained();
  });

  it('on LMDB, writes the claims and sequence numbers of deliveries started together in one transaction, and records every outcome', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'worker-lmdb-'));
    const store = await openLmdbEventStore({ path: join(dir, 'events') });
    cleanups.push(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const { receiver, worker, runner, sub } = await setup(8, store);
    const transactions = vi.spyOn(store.root, 'childTransaction');
    // A page of bus messages: eight deliveries claimed in one turn, two appends each.
    const jobs = await Promise.all(
      Array.from({ length: 8 }, (_, n) =>
        worker.claimFirst({
          deliveryId: `g-${n}`,
          subscription: sub,
          eventId: `ev-g-${n}`,
          event: 'trade_call',
          trigger: 'event',
          body: JSON.stringify({ event: 'trade_call', delivery_id: `g-${n}`, data: { n } }),
        }),
      ),
    );
    expect(transactions).toHaveBeenCalledTimes(1);
    transactions.mockRestore();
    expect(jobs.map((j) => j!.seq).sort((a, b) => a! - b!)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    const results = await Promise.all(jobs.map((j) => worker.submit(j!)));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(receiver.received).toHaveLength(8);
    for (const job of jobs) {
      const events = await store.readStream(deliveryStream(job!.deliveryId));
      expect(events.map((e) => e.type)).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
    }
    expect(await store.readStream(sequenceStream(sub.id))).toHaveLength(8);
    // A redelivered page claims nothing and gets the same numbers back.
    const again = await Promise.all(
      jobs.map((j) =>
        worker.claimFirst({
          deliveryId: j!.deliveryId,
          subscription: sub,
          eventId: j!.eventId,
          event: 'trade_call',
          trigger: 'event',
          body: '{}',
        }),
      ),
    );
    expect(again.every((j) => j === null)).toBe(true);
    expect(await worker.sequence(sub.id, 'g-3')).toBe(jobs[3]!.seq);
    await runner.waitFor(await store.headPosition());
  });
});
