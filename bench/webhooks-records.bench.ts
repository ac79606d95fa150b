/**
 * What a webhook delivery's records cost the LMDB event store, and what grouping them would save
 * (issue 61's lever: one queue record and one outcome per group of deliveries). Each side appends
 * the records of `--deliveries` deliveries in groups of `--group` (the appends of one turn, as a
 * flood makes them: the store writes them in one transaction and one flush), and the CPU of this
 * process per delivery is read beside the rate. The sides, alternated over `--runs` rounds in one
 * process on one store:
 *   per-delivery  the dispatcher's records today: a `DeliverySequenced` carrying the first attempt
 *                 and the body (its id derived from the delivery id) in `webhook-seq-<sub>`, then
 *                 the outcome (`DeliverySucceeded`) as the first event of `delivery-<id>`, expected
 *                 `no_stream`.
 *   grouped       the same sequence records, and one outcome record per group carrying every
 *                 outcome of it (what a grouped delivery log would write for the outcomes).
 *   sequence-only the sequence records alone: what removing the outcome record entirely leaves.
 * The records are built as the worker builds them (trusted: no zod pass). The ratios to
 * `per-delivery` are what the grouped log could save on the store's side at most; the delivery
 * path's CPU per delivery (`webhooks.bench.ts`) puts them in proportion.
 *   npx tsx bench/webhooks-records.bench.ts [--deliveries=4000] [--group=40] [--runs=5]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { deterministicId } from '../contracts/deterministic-id.ts';
import { newEventId } from '../contracts/event-id.ts';
import type { EventData, NewDomainEvent } from '../contracts/events.ts';
import { deliveryStream, sequenceStream } from '../services/webhooks/delivery-log-fold.ts';
import { f0, f2, median, ownCpuMs, whenMain } from './harness.ts';
import { deliveryLikeRequest } from './webhooks.bench.ts';

type Side = 'per-delivery' | 'grouped' | 'sequence-only';
const SIDES: Side[] = ['per-delivery', 'grouped', 'sequence-only'];

interface Figures {
  perSec: number;
  cpuUsPerDelivery: number;
}

function sequenced(
  subscriptionId: string,
  deliveryId: string,
  body: string,
): NewDomainEvent<'DeliverySequenced'> {
  const first: NonNullable<EventData<'DeliverySequenced'>['first']> = {
    deliveryId,
    subscriptionId,
    attempt: 1,
    eventId: randomUUID(),
    webhookEvent: 'trade_call',
    url: 'https://127.0.0.1:19443/hook',
    trigger: 'event',
    body,
    claimId: newEventId(),
  };
  return {
    type: 'DeliverySequenced',
    data: { subscriptionId, deliveryId, first },
    id: deterministicId('webhook-seq', deliveryId),
  };
}

function outcome(subscriptionId: string, deliveryId: string, seq: number): EventData<'DeliverySucceeded'> {
  const sentAt = new Date().toISOString();
  return {
    deliveryId,
    subscriptionId,
    attempt: 1,
    sentAt,
    queuedMs: 3,
    status: 200,
    latencyMs: 1.7,
    response: 'ok',
    seq,
  };
}

async function runSide(
  store: EventStore,
  side: Side,
  subscriptionId: string,
  body: string,
  deliveries: number,
  group: number,
): Promise<Figures> {
  const cpuBefore = ownCpuMs();
  const started = performance.now();
  for (let done = 0; done < deliveries; done += group) {
    const ids = Array.from({ length: Math.min(group, deliveries - done) }, () => randomUUID());
    // The sequence records of one turn, then their outcomes in the next, as a flood's claims and
    // answers come.
    const seqs = await Promise.all(
      ids.map((id) =>
        store
          .append(sequenceStream(subscriptionId), [sequenced(subscriptionId, id, body)])
          .then((r) => r.nextRevision + 1),
      ),
    );
    if (side === 'per-delivery') {
      await Promise.all(
        ids.map((id, i) =>
          store.append(
            deliveryStream(id),
            [{ type: 'DeliverySucceeded', data: outcome(subscriptionId, id, seqs[i]!) }],
            { expectedRevision: 'no_stream' },
          ),
        ),
      );
    } else if (side === 'grouped') {
      // One record for the group: a stand-in type carrying every outcome (the store stores a
      // name outside its catalog as text; the bytes of the outcomes are what it would carry).
      await store.append(`webhook-outcomes-${subscriptionId}`, [
        {
          type: 'DeliveriesRecordedBench',
          data: { outcomes: ids.map((id, i) => outcome(subscriptionId, id, seqs[i]!)) },
        } as unknown as NewDomainEvent<'DeliverySucceeded'>,
      ]);
    }
  }
  const seconds = (performance.now() - started) / 1000;
  return { perSec: deliveries / seconds, cpuUsPerDelivery: ((ownCpuMs() - cpuBefore) * 1000) / deliveries };
}

async function main(options: { deliveries?: number; group?: number; runs?: number }): Promise<void> {
  const deliveries = options.deliveries ?? 4000;
  const group = options.group ?? 40;
  const runs = options.runs ?? 5;
  const dir = mkdtempSync(join(tmpdir(), 'webhook-records-'));
  const store = await openLmdbEventStore({ path: join(dir, 'events') });
  const { body } = deliveryLikeRequest();
  const subscriptionId = randomUUID();
  const load = loadavg()[0]!;
  console.log(
    `webhook delivery records on LMDB: ${deliveries} deliveries a side, groups of ${group}, ${runs} rounds (order rotates), body ${body.length} B, load ${f2(load)}`,
  );
  const results: Record<Side, Figures[]> = { 'per-delivery': [], grouped: [], 'sequence-only': [] };
  try {
    // Warm: every side once, untimed.
    for (const side of SIDES) await runSide(store, side, subscriptionId, body, 2000, group);
    for (let r = 0; r < runs; r++) {
      const order = SIDES.map((_, i) => SIDES[(i + r) % SIDES.length]!);
      for (const side of order)
        results[side].push(await runSide(store, side, subscriptionId, body, deliveries, group));
    }
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const base = median(results['per-delivery'].map((f) => f.cpuUsPerDelivery));
  for (const side of SIDES) {
    const cpu = results[side].map((f) => f.cpuUsPerDelivery);
    const rate = results[side].map((f) => f.perSec);
    console.log(
      `  ${side.padEnd(14)} ${f0(median(rate))} deliveries/s, CPU ${f0(median(cpu))} µs a delivery (runs ${cpu.map(f0).join(', ')}), ${f2(median(cpu) / base)} of per-delivery's`,
    );
  }
  console.log(`  load after: ${f2(loadavg()[0]!)}`);
}

whenMain(import.meta.url, { deliveries: 'number', group: 'number', runs: 'number' }, main);
