import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { buildApp } from '../services/api/app.ts';
import type { Readiness } from '../services/shared/readiness.ts';

export type LoggedLine = {
  msg?: string;
  check?: string;
  err?: { message?: string };
  result?: Record<string, unknown>;
};

/**
 * The HTTP app with only the given readiness checks (no routes of a slice, no metrics), and the
 * lines its log wrote for /readyz's full results: what a test needs to hold the public answer
 * beside what only the log may carry.
 */
export async function readyzApp(
  readiness: Readiness,
): Promise<{ app: FastifyInstance; logged: () => LoggedLine[] }> {
  const lines: LoggedLine[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
  const app = await buildApp({
    config: { BODY_LIMIT_BYTES: 1024 },
    logger,
    readiness,
    metrics: null,
    plugins: [],
  });
  const logged = () =>
    lines.filter((l) => l.msg === 'readiness check: full result (shown generic on /readyz)');
  return { app, logged };
}

/** Words of a failure that name a private host, which /readyz must never show. */
export const PRIVATE_WORDS = ['db-internal', 'db.example', 'altnames'];

/**
 * Node's own check of a certificate's names failing for the host `db-internal`: its message names
 * that bare host, which no pattern of an address can tell from a word.
 */
export function altnameError(): Error {
  const error = checkServerIdentity('db-internal', {
    subject: { CN: 'other' },
    subjectaltname: 'DNS:db.example',
  } as unknown as PeerCertificate);
  if (!error?.message.includes('db-internal')) throw new Error('checkServerIdentity named no host');
  return error;
}
