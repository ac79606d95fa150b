import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { sleep, waitFor } from '../../adapters/bus/contract.ts';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { connectNatsBus } from '../../adapters/bus/nats.ts';
import type { Bus, PublishAck } from '../../adapters/bus/port.ts';
import { allEventsFilter } from '../../adapters/bus/subjects.ts';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { openPostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { ProjectionStore, StoredProjection } from '../../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { parseEventTypes } from '../../contracts/setting-lists.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { NATS_URL, requireNats } from '../../test/nats-server.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { Relay, type RelayOptions } from './relay.ts';

const logger = pino({ level: 'silent' });
const decoder = new TextDecoder();
const natsReachable = await requireNats(NATS_URL);
const postgresReachable = await shouldRunPostgresSuite('relay on PostgreSQL');

async function appendEvents(store: EventStore, count: number, type = 'VerdictRecorded'): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  // A few streams, as in the service, so global positions interleave streams.
  for (let i = 0; i < ids.length; i++) {
    await store.append(`market-${i % 3}`, [{ id: ids[i], type, data: { n: i } }]);
  }
  return ids;
}

/** Counts what reaches the bus, like an idempotent downstream consumer would see it. */
async function collect(bus: Bus, prefix = 'sig') {
  const received: RecordedEvent[] = [];
  const subjects: string[] = [];
  const msgIds: string[] = [];
  const consumer = await bus.consume(
    { durable: 'collector', filterSubject: allEventsFilter(prefix) },
    async (m) => {
      received.push(JSON.parse(decoder.decode(m.data)) as RecordedEvent);
      subjects.push(m.subject);
      msgIds.push(m.msgId);
      await m.ack();
    },
  );
  return { received, subjects, msgIds, consumer };
}

/** A bus whose publishes wait for release() and whose failures are scripted by event id. */
class ScriptedBus implements Bus {
  readonly kind = 'memory' as const;
  inFlight = 0;
  maxInFlight = 0;
  attempts = new Map<string, number>();
  gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  failFirst = new Map<string, number>();

  constructor(readonly inner: MemoryBus = new MemoryBus()) {}

  hold(): void {
    this.gate = new Promise((resolve) => {
      this.open = resolve;
    });
  }

  release(): void {
    this.open?.();
    this.gate = null;
  }

  async publish(subject: string, payload: Uint8Array, options: { msgId: string }): Promise<PublishAck> {
    const attempt = (this.attempts.get(options.msgId) ?? 0) + 1;
    this.attempts.set(options.msgId, attempt);
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      await this.gate;
      if (attempt <= (this.failFirst.get(options.msgId) ?? 0)) throw new Error(`scripted failure ${attempt}`);
      return await this.inner.publish(subject, payload, options);
    } finally {
      this.inFlight--;
    }
  }

  consume: Bus['consume'] = (options, handler) => this.inner.consume(options, handler);
  health = () => this.inner.health();
  close = () => this.inner.close();
}

function relayWith(options: Partial<RelayOptions> & Pick<RelayOptions, 'store' | 'bus'>) {
  const checkpoints = options.checkpoints ?? new MemoryProjectionStore();
  return {
    relay: new Relay({ checkpoints, logger, retry: { initialMs: 10, maxMs: 50 }, ...options }),
    checkpoints,
  };
}

describe('Relay', () => {
  it('publishes every event as its JSON envelope to the subject of its type, msgId = event id', async () => {
    const store = new MemoryEventStore();
    const bus = new MemoryBus();
    const ids = await appendEvents(store, 5);
    await store.append('payment-1', [{ id: randomUUID(), type: 'PaymentSettled', data: { amount: '10' } }]);
    const { relay, checkpoints } = relayWith({ store, bus });
    const sink = await collect(bus);
    await relay.start();
    await waitFor(() => sink.received.length === 6, 'all six events on the bus');
    await relay.stop();

    expect(sink.received).toEqual(await store.readAll());
    expect(sink.msgIds).toEqual(sink.received.map((e) => e.id));
    expect(sink.msgIds.slice(0, 5)).toEqual(ids);
    expect(sink.subjects).toEqual([
      ...Array(5).fill('sig.events.VerdictRecorded'),
      'sig.events.PaymentSettled',
    ]);
    expect(relay.checkpoint).toBe(6);
    expect((await checkpoints.load('relay'))?.checkpoint).toBe(6);
    expect(await relay.lag()).toBe(0);
    expect(relay.stats).toMatchObject({ published: 6, duplicates: 0, failures: 0 });
    await sink.consumer.stop();
    await bus.close();
  });

  it('publishes only the configured types and checkpoints past the rest', async () => {
    const store = new MemoryEventStore();
    const bus = new MemoryBus();
    await appendEvents(store, 2);
    await appendEvents(store, 3, 'DeliverySucceeded');
    await appendEvents(store, 1, 'RegimeShifted');
    const { relay } = relayWith({
      store,
      bus,
      types: parseEventTypes('VerdictRecorded,RegimeShifted'),
    });
    const sink = await collect(bus);
    await relay.start();
    await waitFor(() => relay.checkpoint === 6, 'checkpoint past every event');
    await relay.stop();
    // The bus hands published messages to its consumer asynchronously, after the publish's ack.
    await waitFor(() => sink.received.length >= 3, 'the published events at the consumer');
    expect(sink.received.map((e) => e.type)).toEqual(['VerdictRecorded', 'VerdictRecorded', 'RegimeShifted']);
    expect(relay.stats.published).toBe(3);
    await sink.consumer.stop();
    await bus.close();
  });

  it('saves a checkpoint that only passed over events at most as often as asked, and a restart from it publishes nothing again', async () => {
    const store = new MemoryEventStore();
    const bus = new MemoryBus();
    const checkpoints = new MemoryProjectionStore();
    const saves: number[] = [];
    const counting: ProjectionStore = {
      load: (name) => checkpoints.load(name),
      delete: (name) => checkpoints.delete(name),
      save: async <S>(name: string, snapshot: StoredProjection<S>) => {
        saves.push(snapshot.checkpoint);
        await checkpoints.save(name, snapshot);
      },
    };
    const types = parseEventTypes('VerdictRecorded');
    const { relay } = relayWith({
      store,
      bus,
      checkpoints: counting,
      types,
      skipSave: { everyMs: 3_600_000, everyEvents: 10_000 },
    });
    const sink = await collect(bus);
    await relay.start();
    for (let i = 0; i < 8; i++) await appendEvents(store, 3, 'DeliverySucceeded');
    await waitFor(() => relay.checkpoint === 24, 'the relay past the passed-over events');
    // Nothing published: the stretch waits for the throttle, not one save per page.
    expect(saves).toEqual([]);
    expect(relay.savedCheckpoint).toBe(0);
    await appendEvents(store, 1);
    await waitFor(() => relay.checkpoint === 25, 'the relay past the published event');
    // A publish is saved at once.
    expect(saves).toEqual([25]);
    await appendEvents(store, 5, 'DeliverySucceeded');
    await waitFor(() => relay.checkpoint === 30, 'the relay past the next stretch');
    expect(relay.savedCheckpoint).toBe(25);

    // What a kill -9 now leaves: the saved checkpoint, behind by passed-over events only.
    const crashed = new MemoryProjectionStore();
    await crashed.save('relay', (await checkpoints.load('relay'))!);
    const second = relayWith({ store, bus, checkpoints: crashed, types, name: 'relay' });
    await second.relay.start();
    await waitFor(() => second.relay.checkpoint === 30, 'the restarted relay at the head');
    await second.relay.stop();
    expect(second.relay.stats.published).toBe(0);

    await relay.stop();
    expect(saves).toEqual([25, 30]);
    await waitFor(() => sink.received.length >= 1, 'the published event at the consumer');
    expect(sink.received).toHaveLength(1);

    // By count: a stretch of at least `everyEvents` passed-over events is saved without waiting.
    const byCount = relayWith({
      store,
      bus,
      name: 'by-count',
      types,
      skipSave: { everyMs: 3_600_000, everyEvents: 10 },
    });
    await byCount.relay.start();
    await waitFor(() => byCount.relay.checkpoint === 30, 'the by-count relay at the head');
    expect(byCount.relay.savedCheckpoint).toBe(30);
    await byCount.relay.stop();
    await sink.consumer.stop();
    await bus.close();
  });

  it('follows live appends after catching up, under a custom prefix', async () => {
    const store = new MemoryEventStore();
    const bus = new MemoryBus();
    const { relay } = relayWith({ store, bus, subjectPrefix: 'acme' });
    const sink = await collect(bus, 'acme');
    await relay.start();
    await appendEvents(store, 3, 'RegimeShifted');
    await waitFor(() => sink.received.length === 3, 'live events');
    await appendEvents(store, 2);
    await waitFor(() => sink.received.length === 5, 'more live events');
    await relay.stop();
    expect(sink.subjects).toEqual([
      ...Array(3).fill('acme.events.RegimeShifted'),
      ...Array(2).fill('acme.events.VerdictRecorded'),
    ]);
    await sink.consumer.stop();
    await bus.close();
  });

  it('resumes from its saved checkpoint and does not republish what was acknowledged', async () => {
    const store = new MemoryEventStore();
    await appendEvents(store, 10);
    const checkpoints = new MemoryProjectionStore();
    await checkpoints.save('relay', { version: 1, checkpoint: 7, state: null });
    const bus = new ScriptedBus();
    const { relay } = relayWith({ store, bus, checkpoints });
    expect(await relay.lag()).toBe(10);
    await relay.start();
    await waitFor(() => relay.checkpoint === 10, 'the checkpoint at the head');
    await relay.stop();
    const all = await store.readAll();
    expect([...bus.attempts.keys()]).toEqual(all.slice(7).map((e) => e.id));
    await bus.close();
  });

  it('moves the checkpoint only after the publishes are acknowledged', async () => {
    const store = new MemoryEventStore();
    await appendEvents(store, 20);
    const bus = new ScriptedBus();
    bus.hold();
    const { relay, checkpoints } = relayWith({ store, bus, maxInFlight: 8 });
    await relay.start();
    await waitFor(() => bus.inFlight === 8, 'a full page in flight');
    await sleep(100);
    expect(relay.checkpoint).toBe(0);
    expect(await checkpoints.load('relay')).toBeNull();
    expect(bus.maxInFlight).toBe(8);
    bus.release();
    await waitFor(() => relay.checkpoint === 20, 'the checkpoint at the head');
    await relay.stop();
    expect(bus.maxInFlight).toBeLessThanOrEqual(8);
    expect(bus.attempts.size).toBe(20);
    await bus.close();
  });

  it('after a failed publish retries from the acknowledged prefix and loses nothing', async () => {
    const store = new MemoryEventStore();
    const ids = await appendEvents(store, 30);
    const bus = new ScriptedBus();
    // Event 12 fails twice, event 25 once; later events of the same page succeed on the first try.
    bus.failFirst.set(ids[12]!, 2);
    bus.failFirst.set(ids[25]!, 1);
    const { relay, checkpoints } = relayWith({ store, bus, maxInFlight: 10 });
    const sink = await collect(bus.inner);
    await relay.start();
    await waitFor(() => relay.checkpoint === 30, 'the checkpoint at the head despite failures');
    await relay.stop();
    await waitFor(() => sink.received.length === 30, 'all thirty on the bus');
    // The bus's msgId window dropped the re-publishes of events that had made it the first time.
    expect(new Set(sink.msgIds)).toEqual(new Set(ids));
    // Everything before the first failure went out in order; later events of that page may have
    // overtaken the failed one (pipelining trades order-across-failures for throughput).
    expect(sink.msgIds.slice(0, 12)).toEqual(ids.slice(0, 12));
    expect(sink.msgIds).toHaveLength(30);
    expect(bus.attempts.get(ids[12]!)).toBe(3);
    expect(relay.stats.failures).toBe(3);
    expect(relay.stats.duplicates).toBeGreaterThan(0);
    expect((await checkpoints.load('relay'))?.checkpoint).toBe(30);
    await sink.consumer.stop();
    await bus.close();
  });

  it('retries when saving the checkpoint fails, and stays correct', async () => {
    const store = new MemoryEventStore();
    await appendEvents(store, 12);
    const inner = new MemoryProjectionStore();
    let failures = 2;
    const flaky: ProjectionStore = {
      load: (name) => inner.load(name),
      delete: (name) => inner.delete(name),
      save: async <S>(name: string, snapshot: StoredProjection<S>) => {
        if (failures-- > 0) throw new Error('disk full');
        await inner.save(name, snapshot);
      },
    };
    const bus = new MemoryBus();
    const { relay } = relayWith({ store, bus, checkpoints: flaky, maxInFlight: 5 });
    await relay.start();
    await waitFor(() => relay.checkpoint === 12, 'the checkpoint at the head');
    await relay.stop();
    expect(relay.stats.failures).toBe(2);
    expect((await inner.load('relay'))?.checkpoint).toBe(12);
    await bus.close();
  });

  it('says in its log which side failed: publishing to the bus or saving the checkpoint', async () => {
    const lines: { msg: string; bus?: string }[] = [];
    const captured = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const store = new MemoryEventStore();
    const ids = await appendEvents(store, 6);
    const bus = new ScriptedBus();
    // The first page's first publish fails (nothing acknowledged, nothing to save); the next page
    // is acknowledged and its checkpoint's first save fails.
    bus.failFirst.set(ids[0]!, 1);
    const inner = new MemoryProjectionStore();
    let saveFailures = 1;
    const flaky: ProjectionStore = {
      load: (name) => inner.load(name),
      delete: (name) => inner.delete(name),
      save: async <S>(name: string, snapshot: StoredProjection<S>) => {
        if (saveFailures-- > 0) throw new Error('timeout');
        await inner.save(name, snapshot);
      },
    };
    const { relay } = relayWith({ store, bus, checkpoints: flaky, maxInFlight: 10, logger: captured });
    await relay.start();
    await waitFor(() => relay.checkpoint === 6, 'the checkpoint at the head');
    await relay.stop();
    const failures = lines.filter((l) => l.msg.startsWith('relay:')).map((l) => [l.msg, l.bus]);
    expect(failures).toContainEqual([
      'relay: publishing to the bus failed; retrying from the checkpoint',
      'memory',
    ]);
    expect(failures).toContainEqual([
      'relay: saving the checkpoint to the projection store failed; retrying',
      'memory',
    ]);
    await bus.close();
  });

  it('stop() waits for the page in flight and saves its checkpoint', async () => {
    const store = new MemoryEventStore();
    await appendEvents(store, 6);
    const bus = new ScriptedBus();
    bus.hold();
    const { relay, checkpoints } = relayWith({ store, bus });
    await relay.start();
    await waitFor(() => bus.inFlight === 6, 'the page in flight');
    let stopped = false;
    const stopping = relay.stop().then(() => {
      stopped = true;
    });
    await sleep(100);
    expect(stopped).toBe(false);
    bus.release();
    await stopping;
    expect((await checkpoints.load('relay'))?.checkpoint).toBe(6);
    // Stopped means stopped: later appends are left for the next start.
    await appendEvents(store, 2);
    await sleep(100);
    expect(bus.attempts.size).toBe(6);
    expect(await relay.lag()).toBe(2);

    await relay.start();
    await waitFor(() => relay.checkpoint === 8, 'the restarted relay at the head');
    await relay.stop();
    await bus.close();
  });

  it('stops promptly while a publish keeps failing', async () => {
    const store = new MemoryEventStore();
    const ids = await appendEvents(store, 3);
    const bus = new ScriptedBus();
    bus.failFirst.set(ids[1]!, Number.POSITIVE_INFINITY);
    const { relay } = relayWith({ store, bus, retry: { initialMs: 10, maxMs: 20 } });
    await relay.start();
    await waitFor(() => relay.stats.failures >= 3, 'repeated failures');
    await relay.stop();
    expect(relay.checkpoint).toBe(1);
    await bus.close();
  });

  it('reads the log once with the projections of its process, not once more for itself', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-feed-'));
    const lmdb = await openLmdbEventStore({ path: join(dir, 'events') });
    let read = 0;
    // Every event any follower of this store reads, counted where the store hands it out.
    const store = new Proxy(lmdb, {
      get(target, key, receiver) {
        if (key === 'readAll') {
          return async (options?: { after?: number; maxCount?: number }) => {
            const page = await target.readAll(options);
            read += page.length;
            return page;
          };
        }
        // Unbound: the store's own methods reach readAll through the proxy too.
        return Reflect.get(target, key, receiver);
      },
    }) as EventStore;
    const projection: Projection<number> = {
      name: 'count',
      version: 1,
      initial: () => 0,
      evolve: (n) => n + 1,
    };
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), projection);
    const bus = new MemoryBus();
    const { relay } = relayWith({ store, bus, maxInFlight: 16 });
    const sink = await collect(bus);
    try {
      await runner.start();
      await relay.start();
      const ids = await appendEvents(store, 200);
      await waitFor(() => sink.received.length === 200 && runner.state === 200, 'all 200 relayed and folded');
      await relay.stop();
      await runner.stop();
      expect(sink.msgIds).toEqual(ids);
      // One read of each event serves both; a relay reading for itself made it 400.
      expect(read).toBeLessThan(300);
    } finally {
      await sink.consumer.stop();
      await bus.close();
      await lmdb.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stops taking pages while its queue is full, and loses nothing when the bus comes back', async () => {
    const store = new MemoryEventStore();
    const bus = new ScriptedBus();
    bus.hold();
    const projection: Projection<number> = {
      name: 'count',
      version: 1,
      initial: () => 0,
      evolve: (n) => n + 1,
    };
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), projection);
    const { relay } = relayWith({ store, bus, maxInFlight: 4, maxQueued: 8 });
    const sink = await collect(bus.inner);
    await runner.start();
    await relay.start();
    const ids = await appendEvents(store, 60);
    // The other follower of the log is not held back by the relay's full queue.
    await waitFor(() => runner.state === 60, 'the projection at the head');
    await sleep(100);
    expect(bus.inFlight).toBe(4);
    expect(relay.checkpoint).toBe(0);
    expect(relay.stats.published).toBe(0);
    bus.release();
    await waitFor(() => relay.checkpoint === 60, 'the relay at the head');
    await waitFor(() => sink.received.length === 60, 'all sixty on the bus');
    expect(sink.msgIds).toEqual(ids);
    expect(relay.stats).toMatchObject({ published: 60, duplicates: 0, failures: 0 });
    await relay.stop();
    await runner.stop();
    await sink.consumer.stop();
    await bus.close();
  });

  it('relays from the LMDB event store', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-lmdb-'));
    const store = await openLmdbEventStore({ path: join(dir, 'events'), pollMs: 50 });
    try {
      const ids = await appendEvents(store, 40);
      const bus = new MemoryBus();
      const { relay } = relayWith({ store, bus, maxInFlight: 16 });
      const sink = await collect(bus);
      await relay.start();
      const live = await appendEvents(store, 10);
      await waitFor(() => sink.received.length === 50, 'all fifty LMDB events on the bus');
      await relay.stop();
      expect(sink.msgIds).toEqual([...ids, ...live]);
      await sink.consumer.stop();
      await bus.close();
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!natsReachable)('Relay to NATS JetStream', () => {
  const stream = `RELAYTEST_${randomUUID().slice(0, 8)}`;
  const prefix = `rt${randomUUID().slice(0, 8)}`;
  const busReady = connectNatsBus({ url: NATS_URL, stream, subjectPrefix: prefix, logger });

  afterAll(async () => {
    const bus = await busReady;
    await bus.deleteStream();
    await bus.close();
  });

  it('publishes every event once with acknowledgement and a second relay run only duplicates', async () => {
    const bus = await busReady;
    const store = new MemoryEventStore();
    const ids = await appendEvents(store, 600);
    const sink = await collect(bus, prefix);
    const first = relayWith({ store, bus, subjectPrefix: prefix });
    await first.relay.start();
    await waitFor(() => sink.received.length === 600, 'all 600 events from NATS');
    await first.relay.stop();
    // A relay that lost its checkpoint republishes everything; the stream's window drops it all.
    const second = relayWith({ store, bus, subjectPrefix: prefix, name: 'amnesiac' });
    await second.relay.start();
    await waitFor(() => second.relay.checkpoint === 600, 'the second relay at the head');
    await second.relay.stop();
    await sleep(300);
    expect(second.relay.stats.duplicates).toBe(600);
    expect(sink.msgIds).toEqual(ids);
    await sink.consumer.stop();
  });
});

describe.runIf(postgresReachable)('Relay on the PostgreSQL event store', () => {
  const schema = uniqueSchema('relay');
  afterAll(() => dropSchemas([schema]));

  it('bounds a passed-over stretch by events, not by positions (which leave gaps)', async () => {
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 100, logger });
    const bus = new MemoryBus();
    try {
      await appendEvents(store, 30, 'DeliverySucceeded');
      const head = await store.headPosition();
      // Thirty events whose positions span far more than the bound of 100.
      expect(head).toBeGreaterThan(100);
      const { relay, checkpoints } = relayWith({
        store,
        bus,
        types: parseEventTypes('RegimeShifted'),
        skipSave: { everyMs: 3_600_000, everyEvents: 100 },
      });
      await relay.start();
      await waitFor(() => relay.checkpoint === head, 'the relay past the passed-over events');
      expect(relay.savedCheckpoint).toBe(0);
      await relay.stop();
      expect((await checkpoints.load('relay'))?.checkpoint).toBe(head);
    } finally {
      await store.close();
      await bus.close();
    }
  });
});
