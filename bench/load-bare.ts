/**
 * The baseline's own process: a bare Fastify server (no plugins, no logger) answering each route
 * with the status, headers and body bytes captured from the service, so the ratio compares the
 * service's work against the HTTP floor for exactly the same answer. Started by load-http.ts with
 * the path of a JSON file of routes and a port; prints one line once it listens.
 *
 * With a third argument, a directory, it is the durability floor instead: before answering a POST
 * it waits until a record of the call is on disk, written as a keyed call's debit is (one LMDB
 * record for the calls of one event-loop turn, acknowledged once flushed: group commit). Nothing
 * else of the service runs, so a service whose answers wait for a durable write should not beat it
 * at the same connection count on the same disk, beyond the noise between rounds.
 */
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import { open } from 'lmdb';

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

/** One record per event-loop turn for the calls made in it; each call resolves once it is flushed. */
function groupCommit(dir: string): () => Promise<void> {
  const root = open({ path: dir, noSubdir: false });
  let next = 1;
  let turn: { calls: number; written: Promise<void> } | null = null;
  return () => {
    if (!turn) {
      const current = { calls: 0, written: Promise.resolve() };
      current.written = new Promise<void>((resolve, reject) =>
        setImmediate(() => {
          turn = null;
          try {
            const record = {
              type: 'QuotaDebitsRecorded',
              units: current.calls,
              recordedAt: new Date().toISOString(),
            };
            root
              .put(next++, record)
              .then(() => root.flushed)
              .then(() => resolve(), reject);
          } catch (err) {
            reject(err);
          }
        }),
      );
      turn = current;
    }
    turn.calls++;
    return turn.written;
  };
}
await app.listen({ host: '127.0.0.1', port: Number(port) });
process.stdout.write('listening\n');
