import { createHash } from 'node:crypto';
import { isIPv6 } from 'node:net';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import ipaddr from 'ipaddr.js';
import { ServiceError } from '../../contracts/errors.ts';
import { OAUTH_AUTHORIZE_PATH, OAUTH_PREFIX, SIGNIN_MCP_PATH } from '../../contracts/oauth.ts';
import { isWellFormedKey, liveKeyShapeProblem } from '../keys/key-material.ts';
import type { KeyRecord } from '../keys/key-registry.ts';
import { type KeyLookup, type KeyResolver, KeyUnverifiableError } from '../keys/key-resolver.ts';
import { setBounded } from '../shared/bounded-map.ts';
import { credentialParamName } from '../shared/credential-params.ts';
import type { QuotaMeter } from './quota-meter.ts';
import type { AuthBlock, ServiceMeta } from './service-meta.ts';
import { type QuotaSubject, REMEMBERED_SUBJECTS } from './windows.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who is calling, resolved once per request (callerPlugin, or the sign-in gate's OAuth token). */
    caller: Caller | null;
    /** The `_service` of the answer, once a step has learnt it (a refused key, a metered call). */
    service: ServiceMeta | null;
    /** A presented key that is not live: each channel refuses it in its own shape. */
    callerRefused: CallerRejectedError | null;
  }
  interface FastifyInstance {
    /** The quota meter the caller hook peeks `_service` figures on (callerPlugin's; absent without it). */
    callerQuota?: Pick<QuotaMeter, 'peek'>;
    /** The key resolver the caller hook resolves with (callerPlugin's), for keyStillLive. */
    callerKeys?: Pick<KeyResolver, 'resolve'>;
  }
}

/**
 * Whether the Bearer key a request is served on is still live, asked while an answer is still
 * giving (a long poll's wait): a key revoked meanwhile is given nothing more. True for a request
 * not served on a Bearer key, and for a key that cannot be checked right now.
 */
export function keyStillLive(request: FastifyRequest): boolean {
  const keys = request.server.callerKeys;
  if (keys === undefined || request.caller === null || request.caller.keyId === null) return true;
  const credential = credentialOf({ headers: request.headers, clientAddress: request.ip });
  if (typeof credential !== 'string') return true;
  const lookup = keys.resolve(credential);
  if (lookup instanceof Promise) {
    // Not in the registry now (or the registry is stopped): unknown, not revoked.
    lookup.catch(() => {});
    return true;
  }
  return lookup.status === 'active';
}

/** Declares `request.caller`, `request.service` and `request.callerRefused` where they are not yet. */
export function decorateCaller(app: FastifyInstance): void {
  if (!app.hasRequestDecorator('caller')) app.decorateRequest('caller', null);
  if (!app.hasRequestDecorator('service')) app.decorateRequest('service', null);
  if (!app.hasRequestDecorator('callerRefused')) app.decorateRequest('callerRefused', null);
}

/** Paths that serve no caller: probes and metrics (never resolved nor limited). */
export const UNLIMITED_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * The OAuth sign-in paths (everything under /oauth/: authorize, token, register, revoke, jwks, the
 * consent pages) and their discovery documents: limited by a budget of their own per caller
 * (rate-limit.ts), so a host's anonymous /mcp traffic, or its neighbours' behind one NAT, never
 * blocks its sign-in or its token refresh.
 */
export function isSignInPath(path: string): boolean {
  return path.startsWith(`${OAUTH_PREFIX}/`) || path.startsWith('/.well-known/oauth-');
}

/**
 * The sign-in paths a person's browser shows (authorize, its resume step /oauth/authorize/:uid the
 * browser is sent to after the consent page, and the consent pages): refused with a page.
 */
export function isSignInPage(path: string): boolean {
  return (
    path === OAUTH_AUTHORIZE_PATH ||
    path.startsWith(`${OAUTH_AUTHORIZE_PATH}/`) ||
    path.startsWith(`${OAUTH_PREFIX}/interaction/`)
  );
}

/** The request's path without its query; null for a request that serves no caller (a probe, a preflight). */
export function callerPath(request: FastifyRequest): string | null {
  const query = request.url.indexOf('?');
  const path = query < 0 ? request.url : request.url.slice(0, query);
  return request.method === 'OPTIONS' || UNLIMITED_PATHS.has(path) ? null : path;
}

/**
 * The api's one caller hook (preParsing, in the root context: every route): resolves `request.caller`
 * once, or `request.callerRefused` for a presented key that is not live; before the body is parsed, so an
 * answer to an unreadable body carries its caller's `_service` too. `quota` is the meter every route's
 * `_service` figures are peeked on (answerService), routes without a meter of their own too.
 */
export function callerPlugin(
  keys: Pick<KeyResolver, 'resolve'>,
  quota?: Pick<QuotaMeter, 'peek'>,
): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    decorateCaller(app);
    if (quota !== undefined && !app.hasDecorator('callerQuota')) app.decorate('callerQuota', quota);
    if (!app.hasDecorator('callerKeys')) app.decorate('callerKeys', keys);
    app.addHook('preParsing', (request, _reply, _payload, done) => {
      if (request.caller !== null || callerPath(request) === null) return done();
      const found = resolveCaller(keys, {
        headers: request.headers,
        clientAddress: request.ip,
        url: request.url,
      });
      if (found instanceof Promise) found.then((settled) => settleCaller(request, settled, done), done);
      else settleCaller(request, found, done);
    });
  };
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}

/**
 * Module-level, not a closure per request: under tsx esbuild's keepNames names such a closure at run
 * time, which showed in the keyed call's profile (so rate-limit.ts's per-request helpers too).
 */
function settleCaller(request: FastifyRequest, found: Caller | CallerRejectedError, done: () => void): void {
  if (found instanceof CallerRejectedError) request.callerRefused = found;
  else request.caller = found;
  done();
}

/** The key registry and quota meter every metered route reads. */
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

/** A presented key that must not be served: `unknown` (never issued, or revoked) or `indeterminate` (retryable). */
export class CallerRejectedError extends Error {
  override readonly name = 'CallerRejectedError';
  /** Who the request counts as: the anonymous caller of its client address, with the refusal's auth. */
  readonly caller: Caller;
  constructor(
    readonly reason: 'unknown' | 'indeterminate',
    detail: string,
    message: string,
    clientAddress: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    const outcome = reason === 'unknown' ? 'UNKNOWN' : 'INDETERMINATE';
    // Tier free: the key is not applied, and the refusal counts against its address's anonymous (free)
    // quota, as `_service.quota` shows; `free` with a key presented reads as "not applied" (interface.md 2.2).
    const auth: AuthBlock = { outcome, presented: true, tier: 'free', detail };
    this.caller = { auth, subject: anonymousSubject(clientAddress), keyId: null };
  }
}

const anonymousIds = new Map<string, string>();

/**
 * The anonymous subject of a client address, counted by a hash of it (remembered per address): an
 * IPv4 address on its own, an IPv6 address by its /64 (one subscriber's network, 2^64 addresses
 * that would otherwise be as many callers for the rate limit, the quota and the MCP session cap).
 */
export function anonymousSubject(clientAddress: string): QuotaSubject {
  let id = anonymousIds.get(clientAddress);
  if (id === undefined) {
    id = createHash('sha256')
      .update(`anonymous:${addressScope(clientAddress)}`, 'utf8')
      .digest('hex');
    setBounded(anonymousIds, clientAddress, id, REMEMBERED_SUBJECTS);
  }
  return { id, kind: 'anonymous', plan: 'free' };
}

/** An IPv6 address's /64 (`2001:db8:0:1::/64`); an IPv4 address (IPv4-mapped too) or anything else as given. */
export function addressScope(address: string): string {
  const bare = address.toLowerCase().split('%')[0]!;
  if (!isIPv6(bare)) return address;
  // ipaddr.js (the SSRF guard's parser) expands `::` and reads an IPv4-mapped address as IPv4.
  const ip = ipaddr.process(bare);
  if (ip.kind() === 'ipv4') return ip.toString();
  return `${(ip as ipaddr.IPv6).parts
    .slice(0, 4)
    .map((part) => part.toString(16))
    .join(':')}::/64`;
}

type CallerRequest = {
  headers: Record<string, string | string[] | undefined>;
  clientAddress: string;
  /** The request's path and query: a key sent in the query is named as ignored. */
  url?: string;
};

/** Header names callers sometimes use for keys; we never apply them, but we say so. */
const OTHER_KEY_HEADERS = ['x-api-key', 'api-key', 'apikey', 'x-auth-token', 'x-access-token'];
const BEARER = /^Bearer +(\S+) *$/i;
const HINT = 'a key applies only as the header "Authorization: Bearer <key>"';

/** The key a request presents (only `Authorization: Bearer <key>`), else its anonymous caller, saying why. */
export function credentialOf({ headers, clientAddress, url }: CallerRequest): string | Caller {
  const raw = headers.authorization;
  const value = Array.isArray(raw) ? raw[0] : raw;
  let auth: AuthBlock;
  if (value === undefined || value.trim() === '') {
    const other = OTHER_KEY_HEADERS.find((name) => headers[name] !== undefined);
    // A key in the URL is said to be ignored too, as a key in another header is (only when no header is):
    // any parameter the access log redacts and an x402 quote's resource leaves out.
    const inQuery = other === undefined && url !== undefined ? credentialParamName(url) : undefined;
    auth = { outcome: 'ABSENT', presented: other !== undefined || inQuery !== undefined, tier: 'free' };
    if (other !== undefined) auth.detail = `header ${other} was ignored: ${HINT}`;
    else if (inQuery !== undefined) auth.detail = `query parameter ${inQuery} was ignored: ${HINT}`;
  } else {
    const token = BEARER.exec(value)?.[1];
    if (token !== undefined && isWellFormedKey(token)) return token;
    const detail =
      token === undefined
        ? `Authorization is not a Bearer token: ${HINT}`
        : // A key cut when copied says so; an OAuth access token sent here by mistake is served as
          // anonymous: say where it applies.
          (liveKeyShapeProblem(token) ??
          `the Bearer token is not shaped like a live key (sk_live_…); an OAuth access token is accepted only at ${SIGNIN_MCP_PATH}`);
    auth = { outcome: 'MALFORMED', presented: true, tier: 'free', detail };
  }
  return { auth, subject: anonymousSubject(clientAddress), keyId: null };
}

/** Who is calling, or why a presented key must not be served: a promise only for a key the registry lacks. */
export function resolveCaller(
  keys: Pick<KeyResolver, 'resolve'>,
  request: CallerRequest,
): Caller | CallerRejectedError | Promise<Caller | CallerRejectedError> {
  const credential = credentialOf(request);
  if (typeof credential !== 'string') return credential;
  const lookup = keys.resolve(credential);
  if (!(lookup instanceof Promise)) return lookupCaller(lookup, request.clientAddress);
  return lookup.then(
    (caughtUp) => lookupCaller(caughtUp, request.clientAddress),
    (err: unknown) => {
      if (!(err instanceof KeyUnverifiableError)) throw err;
      return new CallerRejectedError(
        'indeterminate',
        'retry shortly',
        `the API key could not be verified right now (${err.message}); retry shortly`,
        request.clientAddress,
        { cause: err },
      );
    },
  );
}

/** The caller of a key's lookup, one per lookup the resolver remembers (shared, so frozen); a refusal unless active. */
function lookupCaller(lookup: KeyLookup, clientAddress: string): Caller | CallerRejectedError {
  if (lookup.status !== 'active') {
    const detail = lookup.status === 'revoked' ? 'this key was revoked' : 'no such key was issued';
    return new CallerRejectedError('unknown', detail, `unknown API key: ${detail}`, clientAddress);
  }
  let caller = keyCallers.get(lookup);
  if (caller === undefined) {
    const made = keyCaller(lookup.record);
    caller = Object.freeze({ ...made, auth: Object.freeze(made.auth), subject: Object.freeze(made.subject) });
    keyCallers.set(lookup, caller);
  }
  return caller;
}

const keyCallers = new WeakMap<KeyLookup, Caller>();

/** The caller of an active key, whether a Bearer key or an OAuth token acting as it. */
export function keyCaller(record: Pick<KeyRecord, 'keyHash' | 'keyId' | 'plan'>): Caller {
  return {
    auth: { outcome: 'OK', presented: true, tier: record.plan },
    subject: { id: record.keyHash, kind: 'key', plan: record.plan },
    keyId: record.keyId,
  };
}

/** callerHook's `refusals.rejected`: 503 KEY_UNVERIFIABLE for a key that cannot be checked now, else the route's `unknown()`. */
export function keyRefusal(unknown: () => Error): (err: CallerRejectedError) => Error {
  return (err) =>
    err.reason === 'indeterminate'
      ? new ServiceError('KEY_UNVERIFIABLE', { detail: (err.cause as Error).message })
      : unknown();
}

/** The caller's `_service` for an answer that debits nothing (null figures when out of reach). */
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
 * The `_service` of an answer that debits nothing, on any route after the caller hook: what the request
 * learnt (a refused key, a metered call), else its caller's figures peeked on the caller hook's meter;
 * null for a request the hook did not resolve (a probe, a request refused before the hook ran).
 */
export function answerService(request: FastifyRequest): ServiceMeta | Promise<ServiceMeta> | null {
  if (request.service) return request.service;
  const caller = request.caller ?? request.callerRefused?.caller ?? null;
  return caller === null ? null : undebitedService(request.server.callerQuota, caller);
}

/** `body` with its caller's `_service` (answerService), or as it is for a request the caller hook did not resolve. */
export async function withAnswerService<T extends object>(
  request: FastifyRequest,
  body: T,
): Promise<T & { _service?: ServiceMeta }> {
  const service = answerService(request);
  return service === null ? body : { ...body, _service: await service };
}

/**
 * A route's auth hook (preValidation, after callerPlugin), refusing in the channel's shape a key that is
 * not live (`refusals.rejected`) or, where given, a keyless caller (`refusals.keyless`), with the
 * refusal's `_service` on `request.service` (figures peeked on `access().quota`, else on the caller
 * hook's meter).
 */
export function callerHook(
  access: () => { quota?: Pick<QuotaMeter, 'peek'> | undefined },
  refusals: { rejected(err: CallerRejectedError): Error; keyless?(caller: Caller): Error },
) {
  return (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    const { callerRefused } = request;
    const caller = callerRefused?.caller ?? request.caller;
    if (caller === null)
      return done(new Error("a route's caller hook runs after the caller hook (callerPlugin)"));
    const refusal =
      callerRefused !== null
        ? refusals.rejected(callerRefused)
        : caller.keyId === null
          ? refusals.keyless?.(caller)
          : undefined;
    if (refusal === undefined) return done();
    void undebitedService(access().quota ?? request.server.callerQuota, caller).then((service) => {
      request.service = service;
      done(refusal);
    });
  };
}
