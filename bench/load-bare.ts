/**
 * The baseline's own process: a bare Fastify server (no plugins, no logger) answering each route
 * with the status, headers and body bytes captured from the service, so the ratio compares the
 * service's work against the HTTP floor for exactly the same answer. Started by load-http.ts with
 * the path of a JSON file of routes and a port; prints one line once it listens.
 */
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';

export interface CapturedRoute {
  method: 'GET' | 'POST';
  url: string;
  status: number;
  headers: Record<string, string>;
  /** base64 of the body bytes. */
  body: string;
}

const [routesFile, port] = process.argv.slice(2);
const routes = JSON.parse(readFileSync(routesFile!, 'utf8')) as CapturedRoute[];
const app = Fastify({ logger: false });
for (const route of routes) {
  const body = Buffer.from(route.body, 'base64');
  app.route({
    method: route.method,
    url: route.url,
    handler: async (_request, reply) => reply.code(route.status).headers(route.headers).send(body),
  });
}
await app.listen({ host: '127.0.0.1', port: Number(port) });
process.stdout.write('listening\n');
