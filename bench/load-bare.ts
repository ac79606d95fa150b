/**
 * The baseline's own process: a bare Fastify server (no plugins, no logger) answering each route
 * with the status, headers and body bytes captured from the service, so the ratio compares the
 * service's work against the HTTP floor for exactly the same answer. Started by load-http.ts with
 * the path of a JSON file of routes and a port; prints one line once it listens.
 *
 * With BARE_TURN_END=1 in its environment it writes every answer at the end of the event-loop turn,
 * with the service's own hook (services/api/answer-at-turn-end.ts): the same write batching, none of the work.
 *
 * With a third argument, a directory, it is the durability floor instead: before answering a POST
 * it waits until a record of the call is on disk, written as a keyed call's debit is (one LMDB
 * record for the calls of one event-loop turn, acknowledged once flushed: group commit, with the
 * store's own LMDB setting). Nothing
 * else of the service runs, so a service whose answers wait for a durable write should not beat it
 * at the same connection count on the same disk, beyond the noise between rounds.
 */
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import { open } from 'lmdb';
import { TurnBatch } from '../adapters/cache/turn-batch.ts';
import { answerAtTurnEnd } from '../services/api/answer-at-turn-end.ts';

export interface CapturedRoute {
  method: 'GET' | 'POST';
  url: string;
  status: number;
  headers: Record<string, string>;
  /** base64 of the body bytes. */
  body: string;
}

const [routesFile, port, durableDir] = process.argv.slice(2);
const routes = JSON.parse(readFileSync(routesFile!, 'utf8')) as CapturedRoute[];
const app = Fastify({ logger: false });
if (process.env.BARE_TURN_END === '1') app.addHook('onSend', answerAtTurnEnd);
const durable = durableDir ? groupCommit(durableDir) : null;
for (const route of routes) {
  const body = Buffer.from(route.body, 'base64');
  const answer = durable && route.method === 'POST' ? durable : null;
  app.route({
    method: route.method,
    url: route.url,
    handler: async (_request, reply) => {
      if (answer) await answer();
      return reply.code(route.status).headers(route.headers).send(body);
    },
  });
}

/**
 * One record per event-loop turn for the calls made in it (the per-turn batching the service's
 * Redis batches use); each call resolves once its record is flushed.
 */
function groupCommit(dir: string): () => Promise<void> {
  // As the event store opens its LMDB (adapters/event-store/lmdb.ts): overlappingSync off, so each
  // commit flushes under the write lock and the next waits for it. With lmdb-js's default (on), a
  // commit overlaps the previous one's flush, a pipeline the store cannot use (it lost appends
  // with two writing processes): paired runs of 3 rounds on 2026-11-25, 12,519 / 14,482 req/s with
  // it on against 10,112 / 12,106 off, the floor's share of bare 0.57 / 0.52 against 0.59 / 0.48.
  const root = open({ path: dir, noSubdir: false, overlappingSync: false });
  let next = 1;
  const turn = new TurnBatch<{ resolve: () => void; reject: (err: unknown) => void }>((calls) => {
    const record = { type: 'QuotaDebitsRecorded', units: calls.length, recordedAt: new Date().toISOString() };
    Promise.resolve()
      .then(() => root.put(next++, record))
      .then(() => root.flushed)
      .then(
        () => {
          for (const call of calls) call.resolve();
        },
        (err: unknown) => {
          for (const call of calls) call.reject(err);
        },
      );
  }, Number.MAX_SAFE_INTEGER);
  return () => new Promise<void>((resolve, reject) => turn.add({ resolve, reject }));
}
// Stopped with SIGTERM: exit normally, so that a `--cpu-prof` run writes its profile.
process.once('SIGTERM', () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
await app.listen({ host: '127.0.0.1', port: Number(port) });
process.stdout.write('listening\n');
