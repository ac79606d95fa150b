import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type Logger, pino } from 'pino';
import type { Agent } from 'undici';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import { type EventData, newEvent } from '../../contracts/events.ts';
import { parseCidrList } from '../../contracts/setting-lists.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../../test/webhooks-receiver.ts';
import { guardedAgent } from '../shared/ssrf/guarded-agent.ts';
import { deliveryStream, deliveryView, findDelivery, sequenceStream } from './delivery-log-fold.ts';
import { type DeliveryJob, DeliveryWorker } from './delivery-worker.ts';
import { readDeliveryRecord } from './recovery.ts';
import { SecretBox } from './secret-box.ts';
import {
  createSubscription,
  disableSubscription,
  rotateSecret,
  updateSubscription,
} from './subscription-commands.ts';
import { settingsOf } from './subscription-decider.ts';
import { findSubscription } from './subscription-fold.ts';
import { webhookProjection } from './webhook-projection.ts';

/** A memory store listing the streams read one event at a time (a body or a sequence record read back). */
class FirstEventReads extends MemoryEventStore {
  readonly reads: string[] = [];

  override async readStream(stream: string, options?: Parameters<MemoryEventStore['readStream']>[1]) {
    if (options?.maxCount === 1) this.reads.push(stream);
    return super.readStream(stream, options);
  }
}

/** A store whose appends of the events it `holds` wait, once held, until released. */
abstract class HeldAppends extends FirstEventReads {
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;

  protected abstract holds(events: NewEvent[]): boolean;
  /** An append of them has come to the gate. */
  protected abstract arrive(): void;

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
    if (this.gate && this.holds(events)) {
      this.arrive();
      await this.gate;
    }
    return super.append(stream, events, options);
  }
}

/** A memory store whose outcome appends (DeliverySucceeded/Failed) wait until released. */
class HeldOutcomes extends HeldAppends {
  held = 0;

  protected holds(events: NewEvent[]): boolean {
    return events.some((e) => e.type === 'DeliverySucceeded' || e.type === 'DeliveryFailed');
  }

  protected arrive(): void {
    this.held++;
  }
}

/** A memory store whose sequence appends (a first attempt's DeliverySequenced) wait until released. */
class HeldSequencing extends HeldAppends {
  /** Resolves once an append waits at the gate. */
  waiting: Promise<void> = Promise.resolve();
  private arrived: () => void = () => undefined;

  override hold(): void {
    super.hold();
    this.waiting = new Promise((resolve) => {
      this.arrived = resolve;
    });
  }

  protected holds(events: NewEvent[]): boolean {
    return events.some((e) => e.type === 'DeliverySequenced');
  }

  protected arrive(): void {
    this.arrived();
  }
}

/**
 * A memory store that, as PostgreSQL does, answers a write and an idempotent repeat alike: no
 * `written` on its results, so a repeat is told by its position or by the record read back.
 */
class UntoldWrites extends FirstEventReads {
  override async append(...args: Parameters<MemoryEventStore['append']>) {
    const { nextRevision, position } = await super.append(...args);
    return { nextRevision, position };
  }
}

const tls = selfSignedCert();
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The types of a delivery stream's events, in order. */
async function eventTypes(store: EventStore, deliveryId: string): Promise<string[]> {
  return (await store.readStream(deliveryStream(deliveryId))).map((e) => e.type);
}

/** An agent for this file's loopback receivers, trusting their certificate. */
function loopbackAgent(connectionsPerOrigin: number) {
  return guardedAgent({
    addresses: { allow: parseCidrList('127.0.0.1/32') },
    connectTimeoutMs: 2_000,
    connectionsPerOrigin,
    tls: { ca: tls.cert },
  });
}

type WorkerSettings = ConstructorParameters<typeof DeliveryWorker>[0]['settings'];

function workerSettings(settings: Partial<WorkerSettings> & Pick<WorkerSettings, 'endpointConcurrency'>) {
  return {
    retry: { schedule: [0, 60_000], jitter: 0, retryAfterMaxMs: 60_000 },
    timeoutMs: 5_000,
    disableAfterFailedDeliveries: 100,
    disableAfterMs: 86_400_000,
    endpointQueueLimit: 100,
    queueBytesLimit: 0,
    breakerTimeouts: 3,
    ...settings,
  };
}

async function setup<S extends EventStore = HeldOutcomes>(
  endpointConcurrency: number,
  given?: S,
  settings: Partial<WorkerSettings> = {},
) {
  const store = (given ?? new HeldOutcomes()) as S;
  const runner = new ProjectionRunner(store, new MemoryProjectionStore(), webhookProjection);
  await runner.start();
  const receiver: Receiver = await startReceiver(tls);
  const agent = loopbackAgent(endpointConcurrency);
  cleanups.push(async () => {
    if (store instanceof HeldOutcomes) store.release();
    await runner.stop();
    await agent.close();
    await receiver.close();
  });
  const secrets = new SecretBox(randomBytes(32).toString('hex'));
  // A worker on this store and runner: this setup's, or another dispatcher's.
  const newWorker = (
    workerAgent: Agent,
    given: Parameters<typeof workerSettings>[0],
    options: { secrets?: SecretBox; logger?: Logger } = {},
  ) =>
    new DeliveryWorker({
      store,
      runner,
      secrets: options.secrets ?? secrets,
      agent: workerAgent,
      settings: workerSettings(given),
      logger: options.logger ?? pino({ level: 'silent' }),
    });
  const worker = newWorker(agent, { endpointConcurrency, ...settings });
  const created = await createSubscription(store, {
    keyId: 'key-1',
    request: { url: receiver.url, events: ['trade_call'] } as never,
    url: receiver.url,
    secrets,
    maxPerKey: 5,
  });
  await runner.waitFor(created.position);
  const sub = findSubscription(runner.state.subscriptions, created.subscriptionId)!;
  // The first attempt of delivery d-<n>, as the dispatcher claims it.
  const firstAttempt = (n: number) => ({
    deliveryId: `d-${n}`,
    subscription: sub,
    eventId: `ev-${n}`,
    event: 'trade_call' as const,
    attempt: 1,
    trigger: 'event' as const,
    body: JSON.stringify({ delivery_id: `d-${n}`, n }),
  });
  // Its first handling, as the dispatcher's: the attempt in its sequence event, nothing in its own stream yet.
  const claim = (n: number) => {
    const { attempt: _, ...first } = firstAttempt(n);
    return worker.claimFirst(first);
  };
  // A PATCH of its url by its key, folded.
  const moveUrl = async (url: string) => {
    const position = await updateSubscription(store, 'key-1', { ...settingsOf(sub), url }, settingsOf(sub));
    await runner.waitFor(position!);
  };
  return { store, runner, receiver, worker, newWorker, claim, firstAttempt, sub, moveUrl };
}

describe('DeliveryWorker', () => {
  it('runs a first attempt in the slot it took when its url moved while its sequence event was appended', async () => {
    const store = new HeldSequencing();
    const { receiver, worker, claim, sub, moveUrl } = await setup(1, store);
    const moved = await startReceiver(tls);
    cleanups.push(() => moved.close());
    store.hold();
    // Admitted at the old origin (its one slot taken there), then waits on its append.
    const claiming = claim(1);
    await store.waiting;
    // A PATCH of the url, folded meanwhile: the projection's record changes in place.
    await moveUrl(moved.url);
    expect(sub.url).toBe(moved.url);
    store.release();
    const job = await claiming;
    // Sent (to the new url) in the slot it took, and that slot given back: not a TypeError on the
    // new origin's queue, which it holds no slot of, with the old origin's slot never given back.
    expect(await worker.submit(job!)).toMatchObject({ ok: true });
    expect(moved.received).toHaveLength(1);
    // The old origin's one slot is free again: this key's next delivery there goes out.
    await moveUrl(receiver.url);
    expect(await worker.submit((await claim(2))!)).toMatchObject({ ok: true });
    expect(receiver.received).toHaveLength(1);
    await worker.drained();
  });

  it("sends a first attempt whose url moved while its sequence event was appended, though the old origin's breaker opened meanwhile", async () => {
    const store = new HeldSequencing();
    // Two slots: the hung request holds one, the moved attempt takes the other. One timeout opens the
    // breaker. The timeout also bounds the moved attempt's request: 3 s, not 300 ms, for a TLS request
    // on a loaded machine (at load 30 one took longer than 300 ms and failed).
    const { receiver, worker, claim, moveUrl } = await setup(2, store, {
      breakerTimeouts: 1,
      timeoutMs: 3_000,
    });
    const moved = await startReceiver(tls);
    cleanups.push(() => moved.close());
    receiver.behave = () => 'hang';
    const hung = worker.submit((await claim(1))!);
    await receiver.waitFor(1);
    store.hold();
    // Admitted at the old origin (its second slot taken there, its breaker still closed), then waits on its append.
    const claiming = claim(2);
    await store.waiting;
    await moveUrl(moved.url);
    // The old origin's request times out: its breaker opens while the moved attempt still holds a slot there.
    expect(await hung).toMatchObject({ ok: false });
    store.release();
    const job = await claiming;
    expect(job!.slot).not.toBeNull();
    // Sent to the new url, whose breaker is closed: not held for the old origin's.
    expect(await worker.submit(job!)).toMatchObject({ ok: true });
    expect(moved.received).toHaveLength(1);
    // The old origin's breaker was open all along: a delivery back there is held for it.
    await moveUrl(receiver.url);
    expect(await worker.submit((await claim(3))!)).toMatchObject({
      held: true,
      error: expect.stringContaining('circuit open'),
    });
    expect(receiver.received).toHaveLength(1);
    await worker.drained();
  });

  it('frees the endpoint slot once the response is in, before the outcome is recorded', async () => {
    const { store, receiver, worker, claim } = await setup(1);
    store.hold();
    const first = worker.submit((await claim(1))!);
    const second = worker.submit((await claim(2))!);
    // One slot: the second request can only go out if the first one's slot was released while
    // its outcome append is still held.
    await receiver.waitFor(2);
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
    // The first attempts' claim and queue record are in their sequence events.
    expect(await eventTypes(store, 'd-1')).toEqual(['DeliverySucceeded']);
    // The second waited for the slot: queued first, claimed at its turn, just before its send.
    expect(await eventTypes(store, 'd-2')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
  });

  it('sends an attempt it queued without a claim while its queue lease covers the request, and claims it otherwise', async () => {
    // Stuck after 60 s, requests of at most 5 s: the queue event holds the attempt until its turn.
    const leased = await setup(1, undefined, { stuckAfterMs: 60_000 });
    const [first, second] = [(await leased.claim(1))!, (await leased.claim(2))!];
    expect(second.claimed).toBe(false);
    expect(second.leaseUntil).toBe(second.queuedAt + 60_000);
    const results = await Promise.all([leased.worker.submit(first), leased.worker.submit(second)]);
    expect(results.map((r) => r.ok)).toEqual([true, true]);
    expect(await eventTypes(leased.store, 'd-1')).toEqual(['DeliverySucceeded']);
    expect(await eventTypes(leased.store, 'd-2')).toEqual(['DeliverySucceeded']);
    const outcome = (await leased.store.readStream(deliveryStream('d-2')))[0]!;
    await leased.runner.waitFor(outcome.position);
    const record = findDelivery(leased.runner.state.log, 'd-2')!;
    expect(record.status).toBe('succeeded');
    expect(deliveryView(record).attempts).toMatchObject([
      { attempt: 1, outcome: 'succeeded', trigger: 'event' },
    ]);
    expect(leased.receiver.received).toHaveLength(2);

    // Stuck after 5.5 s: a 5 s request and the outcome's append would not fit, so it is claimed.
    const short = await setup(1, undefined, { stuckAfterMs: 5_500 });
    const jobs = [(await short.claim(1))!, (await short.claim(2))!];
    await Promise.all(jobs.map((j) => short.worker.submit(j)));
    expect(await eventTypes(short.store, 'd-2')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
  });

  it('lets another dispatcher take a queued attempt over only by a claim: after a used lease it claims nothing, before a late turn it sends alone, over an overrun lease its outcome is the one recorded', async () => {
    const { store, receiver, worker, newWorker, claim, firstAttempt } = await setup<HeldOutcomes>(
      1,
      undefined,
      {
        stuckAfterMs: 60_000,
      },
    );
    // Another dispatcher on the same log, finding d-n queued past its stuck time.
    const agent = loopbackAgent(1);
    cleanups.push(() => agent.close());
    const other = newWorker(agent, { endpointConcurrency: 1, stuckAfterMs: 60_000 });
    const takeOver = (n: number, expected: number) =>
      other.claim({ ...firstAttempt(n), expected, queuedAttempt: true });
    const sends = (n: number) => receiver.received.filter((r) => r.body.includes(`"n":${n}`)).length;

    // d-2 is sent under its lease; a takeover afterwards finds the stream moved on and claims nothing.
    const first = worker.submit((await claim(1))!);
    const leased = (await claim(2))!;
    expect((await worker.submit(leased)).ok).toBe(true);
    await first;
    expect(await takeOver(2, leased.revision)).toBeNull();

    // d-4's turn here comes after its lease ran out, and after the other dispatcher took it over:
    // that one's claim decides, and this one's claim at the turn conflicts, so it sends nothing.
    const busy = worker.submit((await claim(3))!);
    const late = (await claim(4))!;
    const taken = await takeOver(4, late.revision);
    expect(taken).toMatchObject({ claimed: true });
    expect(taken!.leaseUntil).toBeUndefined();
    expect((await other.submit(taken!)).ok).toBe(true);
    const mine = await worker.submit({ ...late, leaseUntil: late.queuedAt });
    await busy;
    expect(mine).toMatchObject({ ok: false, error: expect.stringContaining('superseded') });
    expect(await eventTypes(store, 'd-2')).toEqual(['DeliverySucceeded']);
    expect(await eventTypes(store, 'd-4')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
    expect([1, 2, 3, 4].map(sends)).toEqual([1, 1, 1, 1]);

    // Had d-6's lease been overrun (a stall past the second it spares), a takeover claim landing
    // before its outcome wins: the outcome sent under the lease is dropped, never recorded over
    // the claimed attempt, and the claim's own send is the one the log records.
    const third = worker.submit((await claim(5))!);
    const overrun = (await claim(6))!;
    await third;
    store.hold();
    const sentUnderLease = worker.submit(overrun);
    await receiver.waitFor(6);
    const claimed = await takeOver(6, overrun.revision);
    expect(claimed).toMatchObject({ claimed: true });
    store.release();
    expect((await sentUnderLease).ok).toBe(true);
    expect((await other.submit(claimed!)).ok).toBe(true);
    const d6 = await store.readStream(deliveryStream('d-6'));
    expect(d6.map((e) => e.type)).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
    expect(d6[1]!.revision).toBe(claimed!.revision + 1);
    expect(sends(6)).toBe(2);
  });

  it('decides at preparation, ahead of the turn, only what still holds at the latest turn', async () => {
    // Stuck after 9 s, requests of at most 4 s: one round is claimed ahead (preclaimRounds 1), so a
    // waiting attempt is prepared up to 4 s before its turn. Prepared a few ms after it was queued,
    // its lease would not cover a turn 4 s later plus the request: it is claimed then. At its turn
    // it would still have been covered, which is why the horizon, not the time of preparation, decides.
    const { store, worker, claim } = await setup(1, undefined, { stuckAfterMs: 9_000, timeoutMs: 4_000 });
    const first = (await claim(1))!;
    const second = (await claim(2))!;
    await new Promise((r) => setTimeout(r, 5));
    const results = await Promise.all([worker.submit(first), worker.submit(second)]);
    expect(results.map((r) => r.ok)).toEqual([true, true]);
    expect(await eventTypes(store, 'd-2')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
  });

  it('sends a job parked beyond the queue limit under its lease, with its bytes read back from the log', async () => {
    const { store, receiver, worker, claim } = await setup(1, undefined, {
      stuckAfterMs: 60_000,
      endpointQueueLimit: 1,
      queueBytesLimit: 0,
    });
    const jobs = [(await claim(1))!, (await claim(2))!, (await claim(3))!];
    // d-1 runs, d-2 waits with its bytes, d-3 waits past the limit without them.
    const results = await Promise.all(jobs.map((j) => worker.submit(j)));
    expect(results.map((r) => r.ok)).toEqual([true, true, true]);
    expect(receiver.received.map((r) => JSON.parse(r.body).n)).toEqual([1, 2, 3]);
    expect(await eventTypes(store, 'd-3')).toEqual(['DeliverySucceeded']);
  });

  it('keeps the bytes of jobs past the queue limit while they fit its byte budget, and reads back only the others', async () => {
    // As sent, with its number (every one of d-1 to d-8 has one digit in both).
    const bodyBytes = JSON.stringify({ delivery_id: 'd-1', seq: 1, n: 1 }).length * 2;
    const { store, receiver, worker, claim, sub } = await setup(1, new HeldOutcomes(), {
      stuckAfterMs: 60_000,
      endpointQueueLimit: 1,
      queueBytesLimit: 2 * bodyBytes,
    });
    const jobs = [];
    for (let n = 1; n <= 8; n++) jobs.push((await claim(n))!);
    // The store said it wrote each claim's sequence record: none was read back.
    expect(store.reads).toEqual([]);
    // d-1 runs; d-2 waits within the limit. The first four waiting are prepared as they are queued
    // (preclaimRounds: 4 rounds of the one slot at this stuck time and timeout), so d-3 to d-5 hand
    // their bytes to their turn at once (their lease covers it; nothing is claimed or read back).
    // d-6 and d-7 keep theirs (the whole budget), d-8 waits without.
    const submitted = jobs.map((j) => worker.submit(j));
    expect(worker.keptBytes).toBe(2 * bodyBytes);
    const results = await Promise.all(submitted);
    expect(results.every((r) => r.ok)).toBe(true);
    expect(receiver.received.map((r) => JSON.parse(r.body).n)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // d-8's bytes, from its sequence event.
    expect(store.reads).toEqual([sequenceStream(sub.id)]);
    expect(worker.keptBytes).toBe(0);
    for (const id of ['d-6', 'd-8']) {
      expect(await eventTypes(store, id)).toEqual(['DeliverySucceeded']);
    }
  });

  it('keeps nothing of a job parked past the queue limit alive while it waits: its bytes can be collected', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const { worker, claim, receiver } = await setup(1, undefined, {
      endpointQueueLimit: 2,
      queueBytesLimit: 0,
      stuckAfterMs: 600_000,
      timeoutMs: 3_000,
    });
    // The first request is never answered: the others wait behind it, all but two past the limit.
    receiver.behave = (_, index) => (index === 0 ? 'hang' : { status: 200 });
    const refs: WeakRef<object>[] = [];
    const tasks: Promise<unknown>[] = [];
    // In a function of its own, so that no frame of this test still holds the last job.
    const submitOne = async (n: number) => {
      const job = (await claim(n))!;
      refs.push(new WeakRef(job));
      tasks.push(worker.submit(job).catch(() => undefined));
    };
    for (let n = 1; n <= 12; n++) await submitOne(n);
    await receiver.waitFor(1);
    await new Promise((r) => setImmediate(r));
    gc();
    // The first is in flight and the next two wait with their bytes (within the limit); the nine
    // parked ones hold only their ids until their turn, when the bytes are read back.
    const alive = refs.map((r) => r.deref() !== undefined);
    expect(alive.slice(3)).toEqual(Array.from({ length: 9 }, () => false));
    expect(worker.owned.size).toBe(12);
    receiver.behave = () => ({ status: 200 });
  });

  it("records a 410's disable with the failed deliveries in a row its own outcome closed, not those failing beside it", async () => {
    const { store, runner, receiver, worker, claim, sub } = await setup(4);
    receiver.behave = () => ({ status: 410 });
    const jobs = [];
    for (let n = 1; n <= 4; n++) jobs.push((await claim(n))!);
    // The four answered 410 at their one attempt, and their outcomes are recorded together: all
    // are folded before the first one's disable is written.
    store.hold();
    const sent = Promise.all(jobs.map((job) => worker.submit(job)));
    await receiver.waitFor(4);
    store.release();
    await sent;
    await worker.drained();
    await runner.waitFor(await store.headPosition());
    expect(findSubscription(runner.state.subscriptions, sub.id)!.failedDeliveries).toBe(4);
    const disables = (await store.readStream('webhooks-key-1')).filter(
      (e) => e.type === 'SubscriptionDisabled',
    );
    expect(disables.map((e) => e.data)).toMatchObject([
      { reason: 'the receiver answered 410 Gone', consecutiveFailures: 1 },
    ]);
  });

  it('records a delivery whose subscription was disabled before its turn as held: unnumbered, unsent, never retried', async () => {
    const { store, runner, receiver, worker, claim, sub } = await setup(1, new MemoryEventStore());
    const job = (await claim(1))!;
    await disableSubscription(store, {
      keyId: 'key-1',
      subscriptionId: sub.id,
      reason: 'endpoint answered 410 Gone',
      consecutiveFailures: 1,
    });
    await runner.waitFor(await store.headPosition());
    const result = await worker.submit(job);
    expect(result).toMatchObject({ ok: false, error: 'subscription disabled' });
    expect(receiver.received).toHaveLength(0);
    await runner.waitFor(await store.headPosition());
    const record = findDelivery(runner.state.log, 'd-1')!;
    // The log numbers the requests sent: none was.
    expect(deliveryView(record)).toMatchObject({
      status: 'failed',
      attempts: [
        {
          attempt: null,
          outcome: 'held',
          sent_at: null,
          error: 'subscription disabled',
          next_attempt_at: null,
        },
      ],
    });
    // Nothing reached the endpoint: its failure clock does not start.
    expect(findSubscription(runner.state.subscriptions, sub.id)?.failingSince).toBeNull();
  });

  it('signs with the current secret alone when the previous one, in its overlap, was sealed under an earlier master key', async () => {
    const { store, runner, newWorker, sub } = await setup(1, new MemoryEventStore());
    // The operator moved to a new master key; the subscriber rotated with the default overlap.
    const next = new SecretBox(randomBytes(32).toString('hex'));
    const rotated = await rotateSecret(store, {
      keyId: 'key-1',
      subscriptionId: sub.id,
      secrets: next,
      overlapMs: 3_600_000,
      expected: sub.secret,
    });
    await runner.waitFor(rotated.position);
    const current = findSubscription(runner.state.subscriptions, sub.id)!;
    const agent = guardedAgent({
      addresses: { allow: [] },
      connectTimeoutMs: 1_000,
      connectionsPerOrigin: 1,
    });
    cleanups.push(() => agent.close());
    const written: string[] = [];
    const worker = newWorker(
      agent,
      { endpointConcurrency: 1 },
      { secrets: next, logger: pino({ level: 'info' }, { write: (chunk: string) => written.push(chunk) }) },
    );
    expect(worker.openSecrets(current, Date.now())).toEqual({ current: rotated.secret, previous: null });
    expect(worker.canOpen(current)).toBe(true);
    expect(worker.secretsCheck()).toEqual({ ok: true });
    // Logged once, as what happens to it: nothing is held for it.
    const lines = written.map((line) => JSON.parse(line) as { level: number; msg: string; secret?: string });
    expect(lines.map(({ level, secret }) => ({ level, secret }))).toEqual([
      { level: 40, secret: 'previous' },
    ]);
    expect(lines[0]!.msg).toContain('left out of the signature');
    expect(lines[0]!.msg).not.toContain('held');
  });

  it('still records a failed attempt with its next retry, and rejects when the store fails', async () => {
    const { store, receiver, worker, claim } = await setup(2);
    receiver.behave = () => ({ status: 503 });
    const result = await worker.submit((await claim(1))!);
    expect(result).toMatchObject({ ok: false, status: 503 });
    const events = await store.readStream(deliveryStream('d-1'));
    expect(events.map((e) => e.type)).toEqual(['DeliveryFailed']);
    expect((events[0]!.data as { nextAttemptAt: string | null }).nextAttemptAt).not.toBeNull();

    const job = (await claim(2))!;
    const append = store.append.bind(store);
    store.append = async (stream, evs, options) => {
      if (evs.some((e) => e.type === 'DeliveryFailed')) throw new Error('store down');
      return append(stream, evs, options);
    };
    await expect(worker.submit(job)).rejects.toThrow('store down');
    await worker.drained();
  });

  it('on LMDB, writes the first attempts of deliveries started together, in their sequence events, in one transaction, and records every outcome', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'worker-lmdb-'));
    const store = await openLmdbEventStore({ path: join(dir, 'events') });
    cleanups.push(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const { receiver, worker, runner, sub } = await setup(8, store);
    const transactions = vi.spyOn(store.root, 'childTransaction');
    const reads = vi.spyOn(store, 'readStream');
    // A first handling of a trade_call delivery, as the dispatcher's.
    const claimFirst = (deliveryId: string, eventId: string, body: string) =>
      worker.claimFirst({
        deliveryId,
        subscription: sub,
        eventId,
        event: 'trade_call',
        trigger: 'event',
        body,
      });
    // A page of bus messages: eight deliveries claimed in one turn, one append each.
    const jobs = await Promise.all(
      Array.from({ length: 8 }, (_, n) =>
        claimFirst(
          `g-${n}`,
          `ev-g-${n}`,
          JSON.stringify({ event: 'trade_call', delivery_id: `g-${n}`, data: { n } }),
        ),
      ),
    );
    expect(transactions).toHaveBeenCalledTimes(1);
    transactions.mockRestore();
    // The store said it wrote each sequence event: nothing read back.
    expect(reads).not.toHaveBeenCalled();
    expect(jobs.map((j) => j!.seq).sort((a, b) => a! - b!)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    const results = await Promise.all(jobs.map((j) => worker.submit(j!)));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(receiver.received).toHaveLength(8);
    // Each delivery's own stream holds its outcome only, pointing at its sequence event.
    for (const job of jobs) {
      const events = await store.readStream(deliveryStream(job!.deliveryId));
      expect(events.map((e) => [e.type, (e.data as { seq?: number }).seq])).toEqual([
        ['DeliverySucceeded', job!.seq],
      ]);
    }
    const sequenced = await store.readStream(sequenceStream(sub.id));
    expect(sequenced.map((e) => (e.data as EventData<'DeliverySequenced'>).first?.attempt)).toEqual(
      Array(8).fill(1),
    );
    // Read back from the log alone, as recovery, resend and after_seq do, with the body every
    // later attempt re-sends.
    const third = jobs[3]!;
    const record = await readDeliveryRecord(store, third.deliveryId);
    expect(record).toMatchObject({ id: third.deliveryId, seq: third.seq, status: 'succeeded' });
    expect(record!.attempts.map((a) => a.outcome)).toEqual(['succeeded']);
    expect(
      await worker.bodyOf({ deliveryId: third.deliveryId, subscriptionId: sub.id, seq: third.seq }),
    ).toBe(JSON.stringify({ event: 'trade_call', delivery_id: third.deliveryId, data: { n: 3 } }));
    // A redelivered page claims nothing and gets the same numbers back.
    const again = await Promise.all(jobs.map((j) => claimFirst(j!.deliveryId, j!.eventId, '{}')));
    expect(again.every((j) => j === null)).toBe(true);
    expect(await worker.sequence(sub.id, 'g-3')).toBe(jobs[3]!.seq);
    // Two handlings of one new delivery at once (a handling stalled past the bus's ack wait beside
    // its redelivery, or an event the relay published twice): one job between them, and the
    // same number for both.
    await runner.waitFor(await store.headPosition());
    const handle = (deliveryId: string) =>
      claimFirst(
        deliveryId,
        'ev',
        JSON.stringify({ event: 'trade_call', delivery_id: deliveryId, data: {} }),
      );
    expect(await handle('g-5')).toBeNull();
    reads.mockClear();
    const both = await Promise.all([handle('g-new'), handle('g-new')]);
    expect(both.filter((j) => j !== null)).toHaveLength(1);
    // The store said the repeat wrote nothing: nothing read back either.
    expect(reads).not.toHaveBeenCalled();
    reads.mockRestore();
    const fresh = both.find((j) => j !== null)!;
    expect(fresh).toMatchObject({ seq: 9, attempt: 1 });
    await worker.submit(fresh);
    await runner.waitFor(await store.headPosition());
  });

  it('on a store that does not say what it wrote, tells a repeated first handling by its position or its record read back', async () => {
    const { store, runner, worker, claim, receiver } = await setup(2, new UntoldWrites());
    // Two handlings of one new delivery at once: each reads the record back, one job between them.
    const both = await Promise.all([claim(1), claim(1)]);
    expect(both.filter((j) => j !== null)).toHaveLength(1);
    expect(store.reads).toHaveLength(2);
    // Redelivered once folded here: its position is known, nothing is read back.
    await runner.waitFor(await store.headPosition());
    store.reads.length = 0;
    expect(await claim(1)).toBeNull();
    expect(store.reads).toEqual([]);
    expect((await worker.submit(both.find((j) => j !== null)!)).ok).toBe(true);
    expect(receiver.received).toHaveLength(1);
  });

  it('reads a delivery of an older log (its first attempt in its own stream, its number beside it) as before', async () => {
    const { store, worker, firstAttempt, sub } = await setup(1);
    // As the dispatcher wrote a first attempt before its sequence event carried it: its claim, with
    // the body, opens the delivery's own stream, and its number's event beside it has no `first`.
    const attempt = firstAttempt(7);
    const { nextRevision } = await store.append(
      deliveryStream('d-7'),
      [
        newEvent('DeliveryAttempted', {
          deliveryId: 'd-7',
          subscriptionId: sub.id,
          attempt: 1,
          eventId: attempt.eventId,
          webhookEvent: attempt.event,
          url: sub.url,
          trigger: attempt.trigger,
          body: attempt.body,
        }),
      ],
      { expectedRevision: 'no_stream' },
    );
    const seq = await worker.sequence(sub.id, 'd-7');
    // That claim's job, as the older dispatcher handed it on: its outcome is recorded after it.
    const queuedAt = Date.now();
    const job: DeliveryJob = {
      ...attempt,
      seq,
      seriesAttempt: 1,
      revision: nextRevision,
      claimed: true,
      slot: null,
      queuedAt,
      dueAt: queuedAt,
    };
    expect(await worker.submit(job)).toMatchObject({ ok: true });
    expect(await eventTypes(store, 'd-7')).toEqual(['DeliveryAttempted', 'DeliverySucceeded']);
    const record = await readDeliveryRecord(store, 'd-7');
    expect(record).toMatchObject({ id: 'd-7', status: 'succeeded' });
    expect(record!.attempts.map((a) => [a.attempt, a.outcome])).toEqual([[1, 'succeeded']]);
    // Its number's event carries no first attempt: the body is the delivery stream's.
    expect(await worker.bodyOf({ deliveryId: 'd-7', subscriptionId: sub.id, seq })).toBe(attempt.body);
    const [sequenced] = await store.readStream(sequenceStream(sub.id));
    expect(await readDeliveryRecord(store, 'd-7', sequenced)).toMatchObject({
      id: 'd-7',
      seq,
      status: 'succeeded',
    });
    await worker.drained();
  });
});
