import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { FailureReason } from '../../contracts/failure-reason.ts';

/**
 * The public reason for a dependency's failure, chosen from the error's code, never from its
 * words: a driver's or the OS's message names the host, address, URL or login it failed on (a TLS
 * altname, a bare host name, an RPC URL with its key), so /readyz shows only the kind of failure
 * and the words go to the service log. The error's causes are read too (fetch wraps the socket's
 * error in `cause`, a connection tried on several addresses fails with an AggregateError).
 */
export type { FailureReason };

/** Node's and OpenSSL's codes of a certificate the client would not accept. */
const TLS_CODES = new Set([
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'HOSTNAME_MISMATCH',
]);

/** By code: the OS's (errno names), undici's, PostgreSQL's SQLSTATE, NATS's. */
const BY_CODE: Record<string, FailureReason> = {
  ECONNREFUSED: 'refused',
  CONNECTION_REFUSED: 'refused',
  ENOTFOUND: 'name not resolved',
  EAI_AGAIN: 'name not resolved',
  EAI_FAIL: 'name not resolved',
  EAI_NONAME: 'name not resolved',
  ETIMEDOUT: 'timed out',
  ESOCKETTIMEDOUT: 'timed out',
  UND_ERR_CONNECT_TIMEOUT: 'timed out',
  UND_ERR_HEADERS_TIMEOUT: 'timed out',
  UND_ERR_BODY_TIMEOUT: 'timed out',
  TIMEOUT: 'timed out',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  EHOSTDOWN: 'unreachable',
  ENETDOWN: 'unreachable',
  ECONNRESET: 'connection reset',
  ECONNABORTED: 'connection reset',
  EPIPE: 'connection reset',
  UND_ERR_SOCKET: 'connection reset',
  ENOSPC: 'out of space',
  EDQUOT: 'out of space',
  MDB_MAP_FULL: 'out of space',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EROFS: 'permission denied',
  AUTHORIZATION_VIOLATION: 'login refused',
  AUTHENTICATION_EXPIRED: 'login refused',
  // PostgreSQL: disk full, invalid password, invalid authorization, no such role's rights.
  '53100': 'out of space',
  '28P01': 'login refused',
  '28000': 'login refused',
  '42501': 'permission denied',
  // PostgreSQL: shutting down, starting up, too many connections, a connection failure.
  '57P01': 'unreachable',
  '57P02': 'unreachable',
  '57P03': 'unreachable',
  '53300': 'refused',
  '08001': 'unreachable',
  '08006': 'unreachable',
};

/** By the error class's name, for clients whose errors carry no code of these (viem's). */
const BY_NAME: Record<string, FailureReason> = {
  TimeoutError: 'timed out',
};

/** By KurrentDB's `type` (its errors' name is Error, their code gRPC's number). */
const BY_TYPE: Record<string, FailureReason> = {
  'access-denied': 'login refused',
  unavailable: 'unreachable',
  'not-leader': 'unreachable',
  'deadline-exceeded': 'timed out',
  timeout: 'timed out',
};

/**
 * By a JetStream API error's own code (its `err_code`). Its `status` is NATS's, not an HTTP
 * answer (404 for a stream the server does not have), so it is not read as one; a refusal of
 * another code is 'failed', its words in the log.
 */
const BY_JETSTREAM_CODE: Record<number, FailureReason> = {
  [JetStreamApiCodes.StreamNotFound]: 'stream not found',
  [JetStreamApiCodes.ConsumerNotFound]: 'consumer not found',
};

function reasonOf(error: object): FailureReason | null {
  if (error instanceof JetStreamApiError) return BY_JETSTREAM_CODE[error.code] ?? 'failed';
  // `status` is the answer a dependency gave (viem's, undici's HTTP errors). Not `statusCode`:
  // that is the status this service answers with (Fastify's name, which ServiceError and the
  // store's EventStoreUnavailableError carry), and the dependency's reason is in their cause.
  const { code, name, type, status } = error as {
    code?: unknown;
    name?: unknown;
    type?: unknown;
    status?: unknown;
  };
  if (typeof code === 'string') {
    if (TLS_CODES.has(code) || code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_')) {
      return 'TLS certificate refused';
    }
    const known = BY_CODE[code];
    if (known) return known;
  }
  // Redis answers refusals with its error code as the first word (NOAUTH, WRONGPASS).
  const message = (error as { message?: unknown }).message;
  if (typeof message === 'string' && /^(?:NOAUTH|WRONGPASS)\b/.test(message)) return 'login refused';
  if (typeof message === 'string' && /\bMDB_MAP_FULL\b/.test(message)) return 'out of space';
  if (typeof status === 'number' && status >= 400 && status <= 599 && Number.isInteger(status)) {
    return `HTTP ${status}`;
  }
  if (typeof type === 'string' && Object.hasOwn(BY_TYPE, type)) return BY_TYPE[type]!;
  if (typeof name === 'string' && Object.hasOwn(BY_NAME, name)) return BY_NAME[name]!;
  return null;
}

/** The kind of failure `error` is, from its code (or its causes'); 'failed' when none is known. */
export function failureReason(error: unknown): FailureReason {
  const seen = new Set<object>();
  const queue: unknown[] = [error];
  while (queue.length > 0) {
    const next = queue.shift();
    if (next === null || typeof next !== 'object' || seen.has(next) || seen.size >= 16) continue;
    seen.add(next);
    const reason = reasonOf(next);
    if (reason) return reason;
    queue.push((next as { cause?: unknown }).cause);
    const errors = (next as { errors?: unknown }).errors;
    if (Array.isArray(errors)) queue.push(...errors);
  }
  // A client's own timeout often has no code (pg's pool: 'timeout exceeded when trying to
  // connect'), and ccxt keeps only the words of the fetch failure it wraps ('fetch failed:
  // getaddrinfo ENOTFOUND <host>', no cause): the words pick the reason, they are not shown. Only
  // an OS or undici code counts there (E…, UND_ERR_…), not a figure that reads as a SQLSTATE.
  const message = error instanceof Error ? error.message : typeof error === 'string' ? error : '';
  for (const [code] of message.matchAll(/\b(?:E[A-Z]{3,}|UND_ERR_[A-Z_]+)\b/g)) {
    const known = Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : undefined;
    if (known) return known;
  }
  return /\btime[sd]? ?out\b|\btimeout\b/i.test(message) ? 'timed out' : 'failed';
}
