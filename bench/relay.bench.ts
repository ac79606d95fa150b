/**
 * Relay throughput to a real NATS JetStream on loopback, against a baseline measured in the same
 * run: raw `js.publish` of the very same payloads (JSON envelopes, msgID set, same stream and
 * subjects), pipelined the same way (windows of 256 awaited together). Both sides wait for every
 * PubAck, so the ratio is the relay's own cost: reading the store, encoding, checkpointing.
 * Core NATS publish (no persistence, no ack) is printed for scale.
 *
 *   npx tsx bench/relay.bench.ts [--events=30000]
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { jetstream } from '@nats-io/jetstream';
import { pino } from 'pino';
import { connectNatsBus, type NatsBus } from '../adapters/bus/nats.ts';
import { eventSubject } from '../adapters/bus/subjects.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import type { NewEvent, RecordedEvent } from '../contracts/envelope.ts';
import { encodeEvent, Relay } from '../services/relay/relay.ts';
import { NATS_URL } from '../test/nats-server.ts';
import { atLeast, recordTarget, whenMain } from './harness.ts';

export interface RelayBenchOptions {
  url?: string;
  events?: number;
  rounds?: number;
  window?: number;
  print?: boolean;
}

export interface RelayBenchResult {
  events: number;
  relayPerSec: number;
  jetstreamPerSec: number;
  corePerSec: number;
  ratio: number;
  target: number;
}

const TARGET_PER_SEC = 20_000;

export async function run(options: RelayBenchOptions = {}): Promise<RelayBenchResult> {
  const url = options.url ?? NATS_URL;
  const events = options.events ?? 30_000;
  const rounds = options.rounds ?? 2;
  const window = options.window ?? 256;
  const id = randomUUID().slice(0, 8);
  const prefix = `bench${id}`;
  const bus = await connectNatsBus({
    url,
    stream: `BENCH_RELAY_${id}`,
    subjectPrefix: prefix,
    logger: pino({ level: 'warn' }),
    requestTimeoutMs: 30_000,
  });
  try {
    // Warm the connection, the stream and the JIT on both paths before measuring.
    await relayRound(bus, prefix, await filledStore(2_000), window);
    await rawRound(bus, prefix, await (await filledStore(2_000)).readAll(), window, 'warm');

    let relayBest = 0;
    let rawBest = 0;
    for (let round = 0; round < rounds; round++) {
      // Alternate the two so drift on the shared machine hits both alike; keep the best of each.
      const forRaw = await (await filledStore(events)).readAll();
      rawBest = Math.max(rawBest, await rawRound(bus, prefix, forRaw, window, `r${round}`));
      relayBest = Math.max(relayBest, await relayRound(bus, prefix, await filledStore(events), window));
    }
    const corePerSec = await coreRound(bus, events);
    const result: RelayBenchResult = {
      events,
      relayPerSec: relayBest,
      jetstreamPerSec: rawBest,
      corePerSec,
      ratio: relayBest / rawBest,
      target: TARGET_PER_SEC,
    };
    if (options.print ?? true) print(result);
    return result;
  } finally {
    await bus.deleteStream().catch(() => false);
    await bus.close();
  }
}

export async function filledStore(count: number): Promise<MemoryEventStore> {
  const store = new MemoryEventStore();
  for (let i = 0; i < count; i += 100) {
    const batch: NewEvent[] = [];
    for (let j = i; j < Math.min(count, i + 100); j++) batch.push(verdictLike(j));
    await store.append(`verdict-binance-coin${i % 50}-1h`, batch);
  }
  return store;
}

/** A payload the size and shape of a VerdictRecorded (about 600 bytes of JSON). */
function verdictLike(n: number): NewEvent {
  return {
    id: randomUUID(),
    type: n % 10 === 0 ? 'RegimeShifted' : 'VerdictRecorded',
    data: {
      exchange: 'binance',
      coin: `COIN${n % 50}`,
      timeframe: '1h',
      call: 'BUY',
      confidence: 71,
      score: 0.4213,
      regime: 'trending_up',
      price: 64_213.5 + n,
      candleCloseTime: 1_760_000_000_000 + n * 60_000,
      feed: 'replay',
      engineVersion: '1.0.0',
      inputs: {
        rsi: 61.2,
        macd: 0.0012,
        adx: 28.4,
        funding: 0.0001,
        basis: 0.0021,
        votes: 'buy:7,sell:2,neutral:3',
      },
      hash: 'a'.repeat(64),
      prevHash: 'b'.repeat(64),
      trigger: 'schedule',
    },
  };
}

export async function relayRound(
  bus: NatsBus,
  prefix: string,
  store: MemoryEventStore,
  window: number,
): Promise<number> {
  const head = await store.headPosition();
  const relay = new Relay({
    store,
    bus,
    checkpoints: new MemoryProjectionStore(),
    subjectPrefix: prefix,
    maxInFlight: window,
    logger: pino({ level: 'warn' }),
  });
  const started = performance.now();
  await relay.start();
  await new Promise<void>((resolve, reject) => {
    const poll = setInterval(() => {
      if (relay.checkpoint >= head) {
        clearInterval(poll);
        resolve();
      } else if (performance.now() - started > 120_000) {
        clearInterval(poll);
        reject(new Error(`relay did not reach ${head} within 120 s (at ${relay.checkpoint})`));
      }
    }, 1);
  });
  const elapsed = performance.now() - started;
  await relay.stop();
  if (relay.stats.duplicates > 0) throw new Error('relay benchmark saw duplicates: not a fair comparison');
  return head / (elapsed / 1000);
}

async function rawRound(
  bus: NatsBus,
  prefix: string,
  events: RecordedEvent[],
  window: number,
  tag: string,
): Promise<number> {
  const js = jetstream(bus.nc, { timeout: 30_000 });
  const started = performance.now();
  for (let i = 0; i < events.length; i += window) {
    const acks = [];
    for (const event of events.slice(i, i + window)) {
      acks.push(
        js.publish(eventSubject(event.type, prefix), encodeEvent(event), { msgID: `${tag}-${event.id}` }),
      );
    }
    const results = await Promise.all(acks);
    if (results.some((ack) => ack.duplicate))
      throw new Error('baseline saw duplicates: not a fair comparison');
  }
  return events.length / ((performance.now() - started) / 1000);
}

/** Fire-and-forget core publishes to a subject no stream captures, flushed once: the wire's ceiling. */
async function coreRound(bus: NatsBus, count: number): Promise<number> {
  const payload = encodeEvent({
    id: randomUUID(),
    type: 'VerdictRecorded',
    stream: 's',
    revision: 0,
    position: 1,
    recordedAt: new Date().toISOString(),
    correlationId: 'c',
    causationId: null,
    data: verdictLike(0).data,
  });
  const subject = `bench_core_${randomUUID().slice(0, 8)}.x`;
  const started = performance.now();
  for (let i = 0; i < count; i++) bus.nc.publish(subject, payload);
  await bus.nc.flush();
  return count / ((performance.now() - started) / 1000);
}

function print(r: RelayBenchResult): void {
  const fmt = (n: number) => Math.round(n).toLocaleString('en');
  const verdict = r.relayPerSec >= r.target ? 'ok' : 'MISSED';
  console.log(`relay → NATS JetStream, ${fmt(r.events)} events per round, acks awaited`);
  console.log(`  relay (store → publish → ack → checkpoint)   ${fmt(r.relayPerSec).padStart(10)} events/s`);
  console.log(
    `  baseline raw js.publish, same pipelining      ${fmt(r.jetstreamPerSec).padStart(10)} events/s`,
  );
  console.log(`  reference core NATS publish (no ack)          ${fmt(r.corePerSec).padStart(10)} msgs/s`);
  console.log(
    `  relay/baseline ratio ${r.ratio.toFixed(2)}; target >= ${fmt(r.target)} events/s: ${verdict}`,
  );
  console.log(
    recordTarget({
      bench: 'relay',
      measure: 'store → JetStream, every PubAck awaited: events/s',
      figure: Math.round(r.relayPerSec),
      target: atLeast(r.target),
      detail: `ratio ${r.ratio.toFixed(2)} of raw js.publish (${fmt(r.jetstreamPerSec)}/s)`,
    }),
  );
}

await whenMain(import.meta.url, { events: 'number' }, run);
