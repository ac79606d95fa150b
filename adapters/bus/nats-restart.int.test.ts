import { randomUUID } from 'node:crypto';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { Relay } from '../../services/relay/relay.ts';
import { type PrivateNatsServer, requireNatsBinary, startNatsServer } from '../../test/nats-server.ts';
import { MemoryEventStore } from '../event-store/memory.ts';
import { MemoryProjectionStore } from '../projection-store/memory.ts';
import { appendMarketBatch, sleep, waitFor } from './contract.ts';
import { connectNatsBus, type NatsBus } from './nats.ts';
import type { Consumer } from './port.ts';
import { allEventsFilter } from './subjects.ts';

const haveBinary = requireNatsBinary('the restart test');

const TOTAL = 3_000;
const decoder = new TextDecoder();
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

describe.skipIf(!haveBinary)('relay → JetStream → durable consumer across nats-server restarts', () => {
  let server: PrivateNatsServer;
  let relayBus: NatsBus | null = null;
  let consumerBus: NatsBus | null = null;
  let consumer: Consumer | null = null;
  let relay: Relay | null = null;

  beforeAll(async () => {
    server = await startNatsServer();
  });

  afterAll(async () => {
    await relay?.stop();
    await consumer?.stop();
    await relayBus?.close();
    await consumerBus?.close();
    await server?.dispose();
  });

  it('loses no event when the server is SIGKILLed and SIGTERMed mid-stream; duplicates are only redeliveries', async () => {
    const stream = `RESTART_${randomUUID().slice(0, 8)}`;
    const prefix = 'sig';
    // Short timeouts so an outage turns into failed publishes and redeliveries quickly.
    const options = { url: server.url, stream, subjectPrefix: prefix, logger, requestTimeoutMs: 1_500 };
    relayBus = await connectNatsBus({ ...options, name: 'relay' });
    consumerBus = await connectNatsBus({ ...options, name: 'consumer' });

    const appended = new Set<string>();
    const deliveries = new Map<string, number>();
    const foreign: string[] = [];
    const processed: string[] = [];
    consumer = await consumerBus.consume(
      {
        durable: 'counter',
        filterSubject: allEventsFilter(prefix),
        ackWaitMs: 2_000,
        defaultNakDelayMs: 100,
      },
      async (message) => {
        const event = JSON.parse(decoder.decode(message.data)) as RecordedEvent;
        if (event.id !== message.msgId || !appended.has(event.id)) foreign.push(message.msgId);
        deliveries.set(event.id, (deliveries.get(event.id) ?? 0) + 1);
        // The idempotent consumer: a seen-set by event id drops redeliveries.
        if (deliveries.get(event.id) === 1) processed.push(event.id);
        await message.ack();
      },
    );

    const store = new MemoryEventStore();
    relay = new Relay({
      store,
      bus: relayBus,
      checkpoints: new MemoryProjectionStore(),
      logger,
      retry: { initialMs: 100, maxMs: 1_000 },
    });
    await relay.start();

    const outages: Array<{ at: number; signal: NodeJS.Signals }> = [
      { at: TOTAL / 3, signal: 'SIGKILL' },
      { at: (2 * TOTAL) / 3, signal: 'SIGTERM' },
    ];
    let count = 0;
    while (count < TOTAL) {
      count = await appendMarketBatch(store, appended, count);
      const outage = outages[0];
      if (outage && count >= outage.at) {
        outages.shift();
        await waitFor(() => processed.length > 0, 'some events through before the outage', 30_000);
        await server.kill(outage.signal);
        // Appends go on while the server is down; the outage outlasts the publish timeout.
        for (let i = 0; i < 10 && count < TOTAL; i++) {
          const more = Array.from({ length: 10 }, () => ({
            id: randomUUID(),
            type: 'VerdictRecorded',
            data: {},
          }));
          for (const event of more) appended.add(event.id);
          await store.append('market-outage', more);
          count += more.length;
          await sleep(250);
        }
        await server.restart();
      }
      await sleep(5);
    }

    await waitFor(() => processed.length >= TOTAL, `all ${TOTAL} events at the consumer`, 90_000);
    await waitFor(() => relay!.checkpoint === TOTAL, 'the relay checkpoint at the head', 30_000);
    const stats = relay.stats;
    await relay.stop();
    relay = null;
    await sleep(500);

    const missing = [...appended].filter((id) => !deliveries.has(id));
    expect(missing).toEqual([]);
    expect(foreign).toEqual([]);
    expect(processed).toHaveLength(TOTAL);
    expect(new Set(processed).size).toBe(TOTAL);
    // The outages were real: publishes failed and were retried from the checkpoint.
    expect(stats.failures).toBeGreaterThan(0);
    expect(stats.published).toBeGreaterThanOrEqual(TOTAL);
    const redelivered = [...deliveries.values()].reduce((sum, n) => sum + n - 1, 0);
    console.info(
      `restart test: ${TOTAL} events, ${stats.failures} failed relay pages, ${stats.duplicates} re-publishes ` +
        `dropped by the msgId window, ${redelivered} redeliveries dropped by the seen-set`,
    );
  });
});

describe.skipIf(!haveBinary)('the first connect while nats-server is down', () => {
  let server: PrivateNatsServer;
  const opened: NatsBus[] = [];

  beforeAll(async () => {
    server = await startNatsServer();
    await server.kill();
  });

  afterAll(async () => {
    for (const bus of opened) await bus.close().catch(() => undefined);
    await server?.dispose();
  });

  it('waits for the server to come back instead of failing the start, then publishes', async () => {
    const stream = `FIRST_${randomUUID().slice(0, 8)}`;
    let settled = false;
    const opening = connectNatsBus({
      url: server.url,
      stream,
      logger,
      requestTimeoutMs: 1_000,
      startupTimeoutMs: 60_000,
    }).finally(() => {
      settled = true;
    });
    // Several refused tries go by while the server is down; the start neither fails nor succeeds.
    await sleep(1_500);
    expect(settled).toBe(false);
    await server.restart();
    const bus = await opening;
    opened.push(bus);
    const ack = await bus.publish('sig.events.first', new TextEncoder().encode('{}'), {
      msgId: randomUUID(),
    });
    expect(ack.sequence).toBe(1);
  });

  it('creates a consumer once the server is back when it was down at consume(), then delivers', async () => {
    const stream = `CONSUME_${randomUUID().slice(0, 8)}`;
    const bus = await connectNatsBus({
      url: server.url,
      stream,
      subjectPrefix: 'late',
      logger,
      requestTimeoutMs: 500,
      startupTimeoutMs: 60_000,
    });
    opened.push(bus);
    await server.kill();
    const received: string[] = [];
    let settled = false;
    const consuming = bus
      .consume({ durable: 'late', filterSubject: 'late.events.>' }, async (message) => {
        received.push(message.msgId);
        await message.ack();
      })
      .finally(() => {
        settled = true;
      });
    // Its JetStream requests fail while the server is down; the consumer's start waits them out.
    await sleep(1_500);
    expect(settled).toBe(false);
    await server.restart();
    const consumer = await consuming;
    const msgId = randomUUID();
    await bus.publish('late.events.x', new TextEncoder().encode('{}'), { msgId });
    await waitFor(() => received.includes(msgId), 'the message published after the restart');
    await consumer.stop();
  });

  it('ends a consumer start that waits for the server when the bus closes', async () => {
    const bus = await connectNatsBus({
      url: server.url,
      stream: `CLOSED_${randomUUID().slice(0, 8)}`,
      subjectPrefix: 'closed',
      logger,
      requestTimeoutMs: 500,
      startupTimeoutMs: 60_000,
    });
    await server.kill();
    const consuming = bus
      .consume({ durable: 'never', filterSubject: 'closed.events.>' }, async (message) => message.ack())
      .then(
        () => null,
        (err: unknown) => err as Error,
      );
    await sleep(1_000);
    const closedAt = Date.now();
    await bus.close();
    // Refused once the bus is closed, not after the startup timeout's minute of retries. Not a
    // figure: a bound well inside that minute, which a start the close did not end runs out whole.
    expect(await consuming).toBeInstanceOf(Error);
    expect(Date.now() - closedAt).toBeLessThan(40_000);
    await server.restart();
  });

  it('gives up after its startup timeout with an error that names the server and the cause', async () => {
    await server.kill();
    const started = Date.now();
    const lines: { msg: string; natsUrl?: string }[] = [];
    const failure = await connectNatsBus({
      url: server.url,
      stream: `GONE_${randomUUID().slice(0, 8)}`,
      logger: pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) }),
      requestTimeoutMs: 500,
      startupTimeoutMs: 1_200,
    }).then(
      () => null,
      (err: unknown) => err as Error,
    );
    expect(failure?.message).toMatch(
      new RegExp(`NATS at ${server.url} not usable within 1200 ms \\(\\d+ tries\\)`),
    );
    // Every try's line names the servers it tried, not only the last error.
    const tries = lines.filter((l) => l.msg === 'NATS not usable yet; retrying');
    expect(tries.length).toBeGreaterThan(0);
    for (const line of tries) expect(line.natsUrl).toBe(server.url);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_200);
  });

  it('fails at once on a setting no outage explains', async () => {
    await server.restart();
    // A lone server cannot hold three copies: JetStream refuses, and waiting would not help.
    const failure = await connectNatsBus({
      url: server.url,
      stream: `WIDE_${randomUUID().slice(0, 8)}`,
      logger,
      replicas: 3,
      startupTimeoutMs: 60_000,
    }).then(
      () => null,
      (err: unknown) => err as Error,
    );
    expect(failure).toBeInstanceOf(Error);
    // Refused for what it is, not after the startup timeout (whose error names it).
    expect(failure?.message).not.toMatch(/not usable within/);
  });
});

describe.skipIf(!haveBinary)('stopping a consumer while nats-server is down', () => {
  let server: PrivateNatsServer;
  let bus: NatsBus | null = null;

  beforeAll(async () => {
    server = await startNatsServer();
  });

  afterAll(async () => {
    await bus?.close().catch(() => undefined);
    await server?.dispose();
  });

  it('stops an unconfirmed-ack consumer without failing: its acks are left to redelivery', async () => {
    // The webhook dispatcher's consumers (confirmAck: false) flush their acks at stop. During a NATS
    // outage that flush rejected ('connection disconnected'), and the dispatcher's stop ended there:
    // its deliveries in flight were not waited for and its projections not stopped.
    const stream = `STOPDOWN_${randomUUID().slice(0, 8)}`;
    const lines: Array<{ msg?: string }> = [];
    const recording = pino(
      { level: 'warn' },
      { write: (line: string) => void lines.push(JSON.parse(line) as { msg?: string }) },
    );
    bus = await connectNatsBus({ url: server.url, stream, subjectPrefix: 'down', logger: recording });
    const received: string[] = [];
    const consumer = await bus.consume(
      { durable: 'unconfirmed', filterSubject: 'down.events.>', confirmAck: false },
      async (message) => {
        received.push(message.msgId);
        await message.ack();
      },
    );
    const msgId = randomUUID();
    await bus.publish('down.events.x', new TextEncoder().encode('{}'), { msgId });
    await waitFor(() => received.includes(msgId), 'the message delivered');
    await server.kill();
    while ((await bus.health()).ok) await sleep(50);
    await expect(consumer.stop()).resolves.toBeUndefined();
    expect(lines.map((l) => l.msg)).toContain(
      'acks not confirmed at stop: NATS unreachable; the server redelivers what they acknowledged',
    );
  });
});

describe.skipIf(!haveBinary)('stopping a consumer while nats-server does not answer', () => {
  let server: PrivateNatsServer;
  let relay: Server | null = null;
  const sockets = new Set<Socket>();
  let bus: NatsBus | null = null;

  beforeAll(async () => {
    server = await startNatsServer();
  });

  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    relay?.close();
    await bus?.close().catch(() => undefined);
    await server?.dispose();
  });

  it('ends the stop within the request timeout when the ack flush gets no answer', async () => {
    // A server that holds the connection and answers nothing (a partition, a hung node): the
    // flush waited for an answer until the connection was found stale, minutes later, and the
    // dispatcher's stop with it, so every SIGTERM ended in `shutdown timed out` and SIGKILL.
    let silent = false;
    relay = createServer((client) => {
      const upstream = connect(server.port, '127.0.0.1');
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('error', () => undefined);
      }
      client.on('data', (chunk) => {
        if (!silent) upstream.write(chunk);
      });
      upstream.on('data', (chunk) => {
        if (!silent) client.write(chunk);
      });
    });
    await new Promise<void>((resolve) => relay!.listen(0, '127.0.0.1', resolve));
    const port = (relay.address() as AddressInfo).port;
    const stream = `STOPSILENT_${randomUUID().slice(0, 8)}`;
    const lines: Array<{ msg?: string }> = [];
    const recording = pino(
      { level: 'warn' },
      { write: (line: string) => void lines.push(JSON.parse(line) as { msg?: string }) },
    );
    bus = await connectNatsBus({
      url: `nats://127.0.0.1:${port}`,
      stream,
      subjectPrefix: 'silent',
      logger: recording,
      requestTimeoutMs: 1_000,
    });
    const received: string[] = [];
    const consumer = await bus.consume(
      { durable: 'unconfirmed', filterSubject: 'silent.events.>', confirmAck: false },
      async (message) => {
        received.push(message.msgId);
        await message.ack();
      },
    );
    const msgId = randomUUID();
    await bus.publish('silent.events.x', new TextEncoder().encode('{}'), { msgId });
    await waitFor(() => received.includes(msgId), 'the message delivered');
    silent = true;
    // Bounded by the test's own timeout: without the bound the stop waits minutes.
    await consumer.stop();
    expect(lines.map((l) => l.msg)).toContain(
      'acks not confirmed at stop: NATS unreachable; the server redelivers what they acknowledged',
    );
  }, 20_000);
});
