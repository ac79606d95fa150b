import { readFileSync } from 'node:fs';
import type { Server } from 'node:net';
import { addressScope } from '../metering/caller.ts';

export interface ConnectionCaps {
  /** Connections the server holds open at once (Node's `server.maxConnections`); null: no cap. */
  total: number | null;
  /** Connections one client address (an IPv6 address by its /64) holds open at once; 0: no cap. */
  perAddress: number;
  /** Peers the per-address cap does not count (trusted proxies, whose clients are many: TrustProxy.peer). */
  exempt: (address: string) => boolean;
  /** Told of a connection closed by the per-address cap: at most once a minute per address. */
  onRefused?: (scope: string, held: number) => void;
}

/** How often one address's refusals are told (onRefused). */
const REFUSAL_NOTICE_MS = 60_000;

/**
 * Caps the server's open connections so that one client cannot take every file descriptor the
 * process may open (slow-loris sockets held until the request timeout): past `total` Node closes
 * each new connection at once (it never reaches HTTP), and a socket from an address that already
 * holds `perAddress` is destroyed as it arrives. Counted on 'connection' (the TCP socket, before
 * TLS), released on its 'close'.
 */
export function capConnections(server: Server, caps: ConnectionCaps): void {
  if (caps.total !== null && caps.total > 0) server.maxConnections = caps.total;
  if (caps.perAddress <= 0) return;
  const open = new Map<string, number>();
  /** When each address's last refusal was told; entries older than the notice period are dropped. */
  const told = new Map<string, number>();
  server.on('connection', (socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || caps.exempt(address)) return;
    const scope = addressScope(address);
    const held = open.get(scope) ?? 0;
    if (held >= caps.perAddress) {
      socket.destroy();
      const now = Date.now();
      if (caps.onRefused && now - (told.get(scope) ?? 0) >= REFUSAL_NOTICE_MS) {
        for (const [other, at] of told) if (now - at >= REFUSAL_NOTICE_MS) told.delete(other);
        told.set(scope, now);
        caps.onRefused(scope, held);
      }
      return;
    }
    open.set(scope, held + 1);
    socket.once('close', () => {
      const left = (open.get(scope) ?? 1) - 1;
      if (left <= 0) open.delete(scope);
      else open.set(scope, left);
    });
  });
}

/**
 * The default total cap: the process's soft RLIMIT_NOFILE (read from /proc/self/limits, Linux)
 * less a reserve for the process's own descriptors (event store, NATS, Redis, PostgreSQL,
 * outbound webhook and facilitator connections, files): a quarter of the limit, at most 4,096.
 * Null where the limit cannot be read or is unlimited (then nothing is capped in total).
 */
export function defaultMaxConnections(limits = readLimits()): number | null {
  const match = limits?.match(/^Max open files\s+(\d+|unlimited)\s/m);
  if (!match || match[1] === 'unlimited') return null;
  const soft = Number(match[1]);
  return Math.max(1, soft - Math.min(4_096, Math.floor(soft / 4)));
}

function readLimits(): string | null {
  try {
    return readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return null;
  }
}
