import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A self-signed certificate for localhost and the given addresses (127.0.0.1 unless told: the
 * fault drill's receiver is on a bridge address), made with the openssl CLI.
 */
export function selfSignedCert(ips: string[] = ['127.0.0.1']): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'webhook-tls-'));
  try {
    execFileSync(
      '/usr/bin/openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        `subjectAltName=DNS:localhost,${ips.map((ip) => `IP:${ip}`).join(',')}`,
      ],
      { stdio: 'ignore' },
    );
    return {
      key: readFileSync(join(dir, 'key.pem'), 'utf8'),
      cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface ReceivedRequest {
  /** The request's path (and query). */
  path: string;
  headers: Record<string, string>;
  body: string;
  at: number;
}

/**
 * What the receiver answers: a status (with headers, after `afterMs` when given: a slow but
 * healthy receiver), or 'hang' (read the request, never answer).
 */
export type Behaviour = { status: number; headers?: Record<string, string>; afterMs?: number } | 'hang';

export interface Receiver {
  url: string;
  port: number;
  received: ReceivedRequest[];
  /** Decides the answer per request; defaults to 200. */
  behave: (request: ReceivedRequest, index: number) => Behaviour;
  /** TCP connections accepted (server.on('connection')): open now, most open at once, ever. */
  connections: { open: number; peak: number; total: number };
  waitFor(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** An HTTPS receiver on loopback that records every request with its raw body. */
export async function startReceiver(tls: { key: string; cert: string }): Promise<Receiver> {
  const sockets = new Set<Socket>();
  const waiters: (() => void)[] = [];
  const receiver: Receiver = {
    url: '',
    port: 0,
    received: [],
    behave: () => ({ status: 200 }),
    connections: { open: 0, peak: 0, total: 0 },
    // A bound against a hang, not a figure: deliveries pass through the log, the bus and TLS, which
    // a loaded two-core host slows several times over.
    async waitFor(count, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (receiver.received.length < count) {
        if (Date.now() > deadline)
          throw new Error(`receiver got ${receiver.received.length} of ${count} requests`);
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 100);
        });
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers))
        headers[k] = Array.isArray(v) ? v.join(',') : String(v);
      const request = {
        path: req.url ?? '',
        headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
      };
      const index = receiver.received.push(request) - 1;
      for (const wake of waiters.splice(0)) wake();
      const behaviour = receiver.behave(request, index);
      if (behaviour === 'hang') return;
      const answer = () => {
        res.writeHead(behaviour.status, { 'content-type': 'text/plain', ...behaviour.headers });
        res.end(`status ${behaviour.status}`);
      };
      if (behaviour.afterMs === undefined) answer();
      else setTimeout(answer, behaviour.afterMs);
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    const { connections } = receiver;
    connections.total++;
    connections.peak = Math.max(connections.peak, ++connections.open);
    s.on('close', () => {
      sockets.delete(s);
      connections.open--;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.port = (server.address() as AddressInfo).port;
  receiver.url = `https://127.0.0.1:${receiver.port}/hook`;
  return receiver;
}

/** The delivery ids a receiver got, in order, repeats included. */
export const deliveryIds = (receiver: Receiver): string[] =>
  receiver.received.map((r) => r.headers['x-service-delivery'] ?? '');
