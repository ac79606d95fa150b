/**
 * Relay throughput into a 3-replica stream against a 1-replica stream on the same 3-node JetStream
 * cluster on loopback, measured in one run (issue 33 target: ≥ 0.5). Both streams live on the same
 * cluster, so the ratio is the price of the copies (the leader waits for a quorum before each
 * PubAck), not of the cluster's routing.
 *
 *   npx tsx bench/relay-replicas.bench.ts [--events=10000]
 */
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { connectNatsBus, type NatsBus } from '../adapters/bus/nats.ts';
import { startNatsCluster } from '../test/nats-cluster.ts';
import { atLeast, recordTarget, whenMain } from './harness.ts';
import { filledStore, relayRound } from './relay.bench.ts';

export interface RelayReplicasResult {
  events: number;
  oneReplicaPerSec: number;
  threeReplicasPerSec: number;
  ratio: number;
  target: number;
}

const TARGET_RATIO = 0.5;

export async function run(
  options: { events?: number; rounds?: number; window?: number; print?: boolean } = {},
): Promise<RelayReplicasResult> {
  const events = options.events ?? 10_000;
  const rounds = options.rounds ?? 3;
  const window = options.window ?? 256;
  const cluster = await startNatsCluster();
  const buses: NatsBus[] = [];
  try {
    const open = async (replicas: number) => {
      const id = randomUUID().slice(0, 8);
      const bus = await connectNatsBus({
        url: cluster.url,
        stream: `BENCH_R${replicas}_${id}`,
        subjectPrefix: `bench${replicas}${id}`,
        replicas,
        logger: pino({ level: 'warn' }),
        requestTimeoutMs: 30_000,
      });
      buses.push(bus);
      return { bus, prefix: `bench${replicas}${id}` };
    };
    const one = await open(1);
    const three = await open(3);
    // Warm both streams, the connections and the JIT before measuring.
    await relayRound(one.bus, one.prefix, await filledStore(2_000), window);
    await relayRound(three.bus, three.prefix, await filledStore(2_000), window);
    let oneBest = 0;
    let threeBest = 0;
    for (let round = 0; round < rounds; round++) {
      // Alternate so drift on the shared machine hits both alike; keep the best of each.
      oneBest = Math.max(oneBest, await relayRound(one.bus, one.prefix, await filledStore(events), window));
      threeBest = Math.max(
        threeBest,
        await relayRound(three.bus, three.prefix, await filledStore(events), window),
      );
    }
    const result = {
      events,
      oneReplicaPerSec: oneBest,
      threeReplicasPerSec: threeBest,
      ratio: threeBest / oneBest,
      target: TARGET_RATIO,
    };
    if (options.print ?? true) print(result);
    return result;
  } finally {
    for (const bus of buses) {
      await bus.deleteStream().catch(() => false);
      await bus.close();
    }
    await cluster.dispose();
  }
}

function print(r: RelayReplicasResult): void {
  const fmt = (n: number) => Math.round(n).toLocaleString('en');
  console.log(
    `relay → 3-node JetStream cluster on loopback, ${fmt(r.events)} events per round, acks awaited`,
  );
  console.log(`  baseline: stream with 1 replica    ${fmt(r.oneReplicaPerSec).padStart(10)} events/s`);
  console.log(`  stream with 3 replicas             ${fmt(r.threeReplicasPerSec).padStart(10)} events/s`);
  console.log(
    `  3-replica/1-replica ratio ${r.ratio.toFixed(2)}; target >= ${r.target}: ${r.ratio >= r.target ? 'met' : 'MISSED'}`,
  );
  console.log(
    recordTarget({
      bench: 'relay-replicas',
      measure: 'relay into a 3-replica stream / into a 1-replica stream',
      figure: r.ratio,
      target: atLeast(r.target),
      detail: `${fmt(r.threeReplicasPerSec)} vs ${fmt(r.oneReplicaPerSec)} events/s`,
    }),
  );
}

await whenMain(import.meta.url, { events: 'number' }, run);
