import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '../../contracts/errors.ts';
import { isWellFormedKey } from '../keys/key-material.ts';
import type { KeyRecord } from '../keys/key-registry.ts';
import { type KeyLookup, type KeyResolver, KeyUnverifiableError } from '../keys/key-resolver.ts';
import type { QuotaMeter, QuotaSubject } from './quota-meter.ts';
import {
  type AuthBlock,
  type PresentedCredential,
  presentedCredential,
  type ServiceMeta,
} from './service-meta.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Who is calling, resolved once per request: by the rate limit in front of every product
     * route, by the sign-in gate for an OAuth token, or by `callerHook`; null until one of them ran.
     */
    caller: Caller | null;
    /** The `_service` of the answer, once a step has learnt it (a refused key, a metered call). */
    service: ServiceMeta | null;
    /** A presented key the caller hook found not live: each channel refuses it in its own shape. */
    callerRefused: CallerRejectedError | null;
  }
}

/** Declares `request.caller`, `request.service` and `request.callerRefused` where they are not yet (once per app, at any level). */
export function decorateCaller(app: FastifyInstance): void {
  if (!app.hasRequestDecorator('caller')) app.decorateRequest('caller', null);
  if (!app.hasRequestDecorator('service')) app.decorateRequest('service', null);
  if (!app.hasRequestDecorator('callerRefused')) app.decorateRequest('callerRefused', null);
}

/** Paths that serve no caller: probes and metrics scraped by the platform (never resolved nor limited). */
export const UNLIMITED_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * The api's one caller hook (preValidation, before every route's own): resolves who is calling
 * once, as `request.caller`, or keeps a presented key that is not live as `request.callerRefused`
 * for the route to refuse in its channel's shape. Without a promise when no key is presented or the
 * registry already holds the key as active. A caller a hook before it knew (the sign-in gate's
 * OAuth token) is kept. Registered in the root context, so it reaches every route.
 */
export function callerPlugin(keys: KeyResolver): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    decorateCaller(app);
    app.addHook('preValidation', (request, _reply, done) => {
      if (request.caller !== null || request.method === 'OPTIONS') {
        done();
        return;
      }
      const query = request.url.indexOf('?');
      if (UNLIMITED_PATHS.has(query < 0 ? request.url : request.url.slice(0, query))) {
        done();
        return;
      }
      const at = { headers: request.headers, clientAddress: request.ip };
      const known = callerNow(keys, at);
      if (known !== null) {
        request.caller = known;
        done();
        return;
      }
      identifyCaller(keys, at).then(
        (caller) => {
          request.caller = caller;
          done();
        },
        (err: unknown) => {
          if (!(err instanceof CallerRejectedError)) {
            done(err as Error);
            return;
          }
          request.callerRefused = err;
          done();
        },
      );
    });
  };
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}

/** The keyed channel's key registry and quota meter, which every metered route reads its caller from. */
export interface KeyedAccess {
  keys: KeyResolver;
  quota: QuotaMeter;
}

/** Who is calling, as far as metering is concerned. */
export interface Caller {
  readonly auth: Readonly<AuthBlock>;
  readonly subject: Readonly<QuotaSubject>;
  /** The key applied, or null for an anonymous caller. */
  readonly keyId: string | null;
}

/**
 * A presented key that must not be served: `unknown` (well-formed, never issued or revoked;
 * not retryable) or `indeterminate` (cannot be checked right now; retryable).
 */
export class CallerRejectedError extends Error {
  override readonly name = 'CallerRejectedError';
  constructor(
    readonly reason: 'unknown' | 'indeterminate',
    readonly service: ServiceMeta,
    message: string,
    /** Who the request counts as without the key: its client address's anonymous quota. */
    readonly anonymous: QuotaSubject,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The anonymous subject of a client address. Its id is read on every keyless request (the rate
 * limit's budget, the quota peek) and the hash is remembered per address: a plain object costs
 * less than a lazy getter, which V8 builds on a slow path for each request.
 */
function anonymousSubject(clientAddress: string): QuotaSubject {
  return { id: anonymousSubjectId(clientAddress), kind: 'anonymous', plan: 'free' };
}

/** Hashes of recent client addresses: a quote or anonymous call hashes its caller's address on every request. */
const anonymousIds = new Map<string, string>();
const REMEMBERED_ADDRESSES = 10_000;

/** Anonymous callers are counted by a hash of their address, never the address itself. */
function anonymousSubjectId(clientAddress: string): string {
  let id = anonymousIds.get(clientAddress);
  if (id === undefined) {
    id = createHash('sha256').update(`anonymous:${clientAddress}`, 'utf8').digest('hex');
    if (anonymousIds.size >= REMEMBERED_ADDRESSES) anonymousIds.delete(anonymousIds.keys().next().value!);
    anonymousIds.set(clientAddress, id);
  }
  return id;
}

type CallerRequest = { headers: Record<string, string | string[] | undefined>; clientAddress: string };

/** The caller of a request that presents no key to resolve, without a promise; null when one is presented. */
export function keylessCaller(request: CallerRequest): Caller | null {
  return callerWithout(presentedCredential(request.headers, isWellFormedKey), request.clientAddress);
}

/**
 * The caller of a request, without a promise, when no key is presented or the key is one the
 * registry already holds as active; null when it must be identified (identifyCaller), which also
 * refuses a key that is unknown, revoked or cannot be checked.
 */
export function callerNow(keys: KeyResolver, request: CallerRequest): Caller | null {
  const credential = presentedCredential(request.headers, isWellFormedKey);
  if (credential.kind === 'none') return callerWithout(credential, request.clientAddress);
  const lookup = keys.resolveNow(credential.token);
  if (lookup?.status !== 'active') return null;
  let caller = keyCallers.get(lookup);
  if (caller === undefined) {
    const made = keyCaller(lookup.record);
    caller = Object.freeze({
      auth: Object.freeze(made.auth),
      subject: Object.freeze(made.subject),
      keyId: made.keyId,
    });
    keyCallers.set(lookup, caller);
  }
  return caller;
}

/**
 * The caller of each remembered lookup (KeyResolver keeps one while the registry is unchanged),
 * shared by the requests of that key: frozen, since no request may change what the next reads.
 */
const keyCallers = new WeakMap<KeyLookup, Caller>();

function callerWithout(credential: PresentedCredential, clientAddress: string): Caller | null {
  if (credential.kind !== 'none') return null;
  return {
    auth: {
      outcome: credential.outcome,
      presented: credential.presented,
      tier: 'free',
      ...(credential.detail ? { detail: credential.detail } : {}),
    },
    subject: anonymousSubject(clientAddress),
    keyId: null,
  };
}

export async function identifyCaller(
  keys: Pick<KeyResolver, 'resolve'>,
  request: CallerRequest,
): Promise<Caller> {
  const credential = presentedCredential(request.headers, isWellFormedKey);
  if (credential.kind === 'none') return callerWithout(credential, request.clientAddress)!;
  let lookup: Awaited<ReturnType<KeyResolver['resolve']>>;
  try {
    lookup = await keys.resolve(credential.token);
  } catch (err) {
    if (!(err instanceof KeyUnverifiableError)) throw err;
    throw new CallerRejectedError(
      'indeterminate',
      {
        auth: { outcome: 'INDETERMINATE', presented: true, tier: 'free', detail: 'retry shortly' },
        quota: null,
      },
      `the API key could not be verified right now (${err.message}); retry shortly`,
      anonymousSubject(request.clientAddress),
      { cause: err },
    );
  }
  if (lookup.status !== 'active') {
    const detail = lookup.status === 'revoked' ? 'this key was revoked' : 'no such key was issued';
    throw new CallerRejectedError(
      'unknown',
      { auth: { outcome: 'UNKNOWN', presented: true, tier: 'free', detail }, quota: null },
      `unknown API key: ${detail}`,
      anonymousSubject(request.clientAddress),
    );
  }
  return keyCaller(lookup.record);
}

/** The caller of an active key: whether it came as a Bearer key or as an OAuth token acting as it, metered alike. */
export function keyCaller(record: Pick<KeyRecord, 'keyHash' | 'keyId' | 'plan'>): Caller {
  return {
    auth: { outcome: 'OK', presented: true, tier: record.plan },
    subject: { id: record.keyHash, kind: 'key', plan: record.plan },
    keyId: record.keyId,
  };
}

/**
 * `_service` for a refused key: the contract puts a live count in every response, so it carries
 * the quota the request counts against without the key (its address's anonymous one). When the
 * counters are out of reach it stays null rather than failing the refusal.
 */
export async function rejectedService(
  quota: Pick<QuotaMeter, 'peek'>,
  err: CallerRejectedError,
): Promise<ServiceMeta> {
  try {
    return { ...err.service, quota: await quota.peek(err.anonymous) };
  } catch {
    return err.service;
  }
}

/** What the caller hook reads: the key registry, and the quota a refusal's `_service` peeks (when there is one). */
export interface CallerAccess {
  keys: Pick<KeyResolver, 'resolve'>;
  quota?: Pick<QuotaMeter, 'peek'> | undefined;
}

/** How a route refuses a caller: each channel answers in its own shape, with codes from the catalog. */
export interface CallerRefusals {
  /** A presented key that is not live: unknown or revoked, or one that cannot be checked right now. */
  rejected(err: CallerRejectedError): Error;
  /** Given, the route needs a live key: a caller without one (none presented, or malformed) is refused with this. */
  keyless?(caller: Caller): Error;
}

/**
 * `CallerRefusals.rejected` in the catalog's words: a key that cannot be checked right now is 503
 * KEY_UNVERIFIABLE (retryable), whatever the route; an unknown or revoked one is the route's own
 * `unknown()`.
 */
export function keyRefusal(unknown: () => Error): (err: CallerRejectedError) => Error {
  return (err) =>
    err.reason === 'indeterminate'
      ? new ServiceError('KEY_UNVERIFIABLE', { detail: (err.cause as Error).message })
      : unknown();
}

/**
 * The caller's `_service` for an answer that debits nothing: the live quota of the key, or of the
 * anonymous caller's address (a 402 quote carries it too, as the contract asks of every response);
 * null figures when the counters are out of reach or there is no quota to read.
 */
export function undebitedService(
  quota: Pick<QuotaMeter, 'peek'> | undefined,
  caller: Caller,
): Promise<ServiceMeta> {
  if (quota === undefined) return Promise.resolve({ auth: caller.auth, quota: null });
  return quota.peek(caller.subject).then(
    (snapshot) => ({ auth: caller.auth, quota: snapshot }),
    () => ({ auth: caller.auth, quota: null }),
  );
}

/**
 * The one auth hook of every channel (preValidation): the request's caller resolved once, set as
 * `request.caller`, which the route reads and nothing else. Without a promise when a hook before
 * it already knew the caller (the sign-in gate) or no key is presented. A presented key that is
 * not live is refused with `refusals.rejected`, and a caller without a key, where the route needs
 * one, with `refusals.keyless`; either way after `request.service` is set to the refusal's
 * `_service` (for a refused key, the quota the request counts against without it).
 */
export function callerHook(access: () => CallerAccess, refusals: CallerRefusals) {
  const keyless = (request: FastifyRequest, caller: Caller, done: (err?: Error) => void): void => {
    request.caller = caller;
    if (caller.keyId !== null || refusals.keyless === undefined) {
      done();
      return;
    }
    const refusal = refusals.keyless(caller);
    undebitedService(access().quota, caller).then((service) => {
      request.service = service;
      done(refusal);
    });
  };
  const refuse = async (request: FastifyRequest, err: CallerRejectedError, done: (err?: Error) => void) => {
    const { quota } = access();
    request.service = quota ? await rejectedService(quota, err) : err.service;
    done(refusals.rejected(err));
  };
  return (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    if (request.callerRefused !== null) {
      void refuse(request, request.callerRefused, done);
      return;
    }
    // Resolved by the api's caller hook; a route served without it (a test's own app) resolves here.
    const known = request.caller ?? keylessCaller({ headers: request.headers, clientAddress: request.ip });
    if (known !== null) {
      keyless(request, known, done);
      return;
    }
    identifyCaller(access().keys, { headers: request.headers, clientAddress: request.ip }).then(
      (caller) => keyless(request, caller, done),
      (err: unknown) => {
        if (err instanceof CallerRejectedError) void refuse(request, err, done);
        else done(err as Error);
      },
    );
  };
}
