/**
 * The durable floor of a webhook delivery (issue 61): what any at-least-once sender must pay per
 * delivery at the least. A loop that POSTs the same signed bytes a delivery carries to the same
 * receiver, and then records the outcome durably, one flushed LMDB put per delivery, opened the
 * way the project's LMDB event store opens its environment (`adapters/event-store/lmdb.ts`:
 * `overlappingSync: false`, so each commit is flushed inside it, under the write lock). The puts of
 * one turn of the event loop share a commit, as lmdb-js batches them and as the event store groups
 * its appends; each delivery still waits for its own record on disk before its next request.
 * Measured against it, the dispatcher's extra is its own work (matching, sequencing, queueing,
 * retries, the event log's bookkeeping), not the request or the disk.
 */
import { randomUUID } from 'node:crypto';
import { open, type RootDatabase } from 'lmdb';
import { type Dispatcher, request } from 'undici';

export interface FloorRequest {
  body: string;
  headers: Record<string, string>;
}

/** The outcome store of the floor: an LMDB environment opened like the event store's. */
export function openFloorStore(path: string): RootDatabase {
  return open({ path, noSubdir: false, overlappingSync: false, remapChunks: true });
}

/**
 * One record, resolved once it is on disk: the put's commit, then the flush that follows it (with
 * `overlappingSync: false` the commit already syncs; awaiting `flushed` keeps that true whatever
 * the options). The floors of the webhooks and x402 benches both record this way.
 */
export async function putDurably(store: RootDatabase, key: string, value: unknown): Promise<void> {
  await store.put(key, value);
  await store.flushed;
}

/**
 * `count` deliveries at `concurrency`: each a POST of `req` to `url`, its answer read, then (with a
 * `store`: the durable floor) its outcome put and flushed; without one, the bare POST loop. One
 * loop for both, so the two sides differ only by the record. Resolves with deliveries per second.
 */
export async function postLoop(options: {
  url: string;
  agent: Dispatcher;
  req: FloorRequest;
  count: number;
  concurrency: number;
  store: RootDatabase | null;
}): Promise<number> {
  const { url, agent, req, count, concurrency, store } = options;
  const deliveryId = randomUUID();
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const n = next++;
        const sentAt = Date.now();
        const t0 = performance.now();
        const res = await request(url, {
          method: 'POST',
          dispatcher: agent,
          body: req.body,
          headers: req.headers,
        });
        const response = (await res.body.text()).slice(0, 1024);
        if (store === null) continue;
        // What an outcome record holds: which delivery and attempt, when, how it went.
        await putDurably(store, `${deliveryId}:${n}`, {
          deliveryId,
          attempt: 1,
          outcome: res.statusCode >= 200 && res.statusCode < 300 ? 'succeeded' : 'failed',
          status: res.statusCode,
          latencyMs: performance.now() - t0,
          sentAt,
          response,
        });
      }
    }),
  );
  return count / ((performance.now() - started) / 1000);
}
