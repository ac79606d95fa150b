import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import {
  type Cache,
  CacheUnavailableError,
  type DebitResult,
  type QuotaWindow,
} from '../../adapters/cache/port.ts';
import type { Config } from '../../contracts/config.ts';
import { ERRORS, errorMessage } from '../../contracts/errors.ts';
import type { Plan } from '../../contracts/events.ts';
import { SIGNIN_MCP_PATH } from '../../contracts/oauth.ts';
import { routedPath } from '../shared/routed-path.ts';
import { type Caller, callerPath, isSignInPage, isSignInPath, undebitedService } from './caller.ts';
import type { QuotaMeter, RateWindows } from './quota-meter.ts';
import type { QuotaSubject } from './windows.ts';

/**
 * Who a request is limited as: an applied key by its plan, anyone else by client address; on the
 * OAuth sign-in paths, 'signin', whoever calls (isSignInPath).
 */
export type RateTier = Plan | 'anonymous' | 'signin';

export type RateLimitSettings = Pick<
  Config,
  | 'RATE_LIMIT_WINDOW_MS'
  | 'RATE_LIMIT_ANONYMOUS'
  | 'RATE_LIMIT_FREE'
  | 'RATE_LIMIT_STARTER'
  | 'RATE_LIMIT_PRO'
  | 'RATE_LIMIT_TOOL_SHARE'
  | 'RATE_LIMIT_SIGNIN'
>;

export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Until the window starts afresh. */
  resetMs: number;
}

/**
 * Request-rate limits per credential, and per credential and tool, in fixed windows aligned on the clock
 * (every replica and this process's stand-in agree where one ends). Counted on Redis (a turn's requests in
 * one script call), in this process on the embedded defaults and while Redis is out of reach: an outage
 * neither opens the gate nor closes the service. A refused request takes from no budget. A busy key's tool
 * calls come out of its quota lease's grants (QuotaMeter.rates): no round trip, no count per request.
 */
export class RateLimiter implements RateWindows {
  private readonly windowMs: number;
  /** Per tier: the start of its credential's and its tools' budget keys, and their limits. */
  private readonly tiers: Record<RateTier, { allKey: string; toolKey: string; all: number; tool: number }>;
  /** Redis (null on the embedded defaults), and this process's counts. */
  private readonly shared: Cache | null;
  private readonly here: MemoryCache;
  /** The quota meter whose leases prepay requests. */
  private readonly meter: QuotaMeter | null;
  private readonly logger: Logger | null;

  constructor(settings: RateLimitSettings, cache: Cache | null, meter?: QuotaMeter, logger?: Logger) {
    this.shared = cache?.kind === 'redis' ? cache : null;
    this.meter = meter ?? null;
    this.logger = logger ?? null;
    if (this.meter !== null) this.meter.rates = this;
    // The api's cache on the embedded defaults (leases prepay there: two caches, two budgets); else its own.
    this.here = cache instanceof MemoryCache ? cache : new MemoryCache();
    this.windowMs = Math.max(1, settings.RATE_LIMIT_WINDOW_MS);
    // The tier twice in a key, as every replica has counted since the limit was shared.
    const tier = (name: RateTier, all: number) => ({
      allKey: `rl:${name}:all:${name}:`,
      toolKey: `rl:${name}:tool:${name}:`,
      all,
      tool: Math.max(1, Math.ceil(all * settings.RATE_LIMIT_TOOL_SHARE)),
    });
    this.tiers = {
      anonymous: tier('anonymous', settings.RATE_LIMIT_ANONYMOUS),
      free: tier('free', settings.RATE_LIMIT_FREE),
      starter: tier('starter', settings.RATE_LIMIT_STARTER),
      pro: tier('pro', settings.RATE_LIMIT_PRO),
      signin: tier('signin', settings.RATE_LIMIT_SIGNIN),
    };
  }

  /** Takes one request from the credential's budget and the tool's: at once in-process, else a promise. */
  decide(tier: RateTier, credential: string, tool: string | null): RateDecision | Promise<RateDecision> {
    const now = Date.now();
    const end = this.endOf(now);
    const resetMs = end + 1 - now;
    const prepaid = tool === null ? null : this.meter?.takeRate(credential, tier, tool, end);
    if (prepaid) return decision(prepaid.windows, prepaid.granted, resetMs);
    const windows = this.windowsAt(tier, credential, tool, end);
    if (this.shared === null) return decision(windows, this.here.debitWindowsNow(windows, 1), resetMs);
    return this.shared.debitWindows(windows, 1).then(
      (result) => decision(windows, result, resetMs),
      (err: unknown) => {
        // An outage (or a server refusing writes) falls back to this process; a refused script is a bug.
        if (!(err instanceof CacheUnavailableError)) throw err;
        return decision(windows, this.here.debitWindowsNow(windows, 1), resetMs);
      },
    );
  }

  /**
   * What makes a JSON-RPC batch (`tools` as for decideBatch) larger than any window of `tier` can
   * take: more messages than its limit, or more calls of one tool than the tool's share; null when
   * it may fit. Such a batch would be refused in every window, so it is not a matter of waiting.
   */
  batchTooLarge(
    tier: RateTier,
    tools: (string | null)[],
  ): { size: number; limit: number; tool: string | null } | null {
    const { all, tool: perTool } = this.tiers[tier];
    if (tools.length > all) return { size: tools.length, limit: all, tool: null };
    const calls = new Map<string, number>();
    for (const tool of tools) {
      if (tool === null) continue;
      const n = (calls.get(tool) ?? 0) + 1;
      if (n > perTool) return { size: tools.filter((t) => t === tool).length, limit: perTool, tool };
      calls.set(tool, n);
    }
    return null;
  }

  /**
   * A JSON-RPC batch (`tools`: each message's tool, null for any other message): one from the
   * credential's budget per message (one for an empty batch), and from each tool's share one per call
   * of it, all or none, as the batch is then answered or refused whole. Windows taking the same amount
   * are debited in one atomic step (a batch of one tool's calls: one step); when a later step refuses
   * or throws, what the earlier ones took is given back (a give-back that fails is logged: those
   * counts stay taken until their window ends). No lease prepays a batch: its windows are debited
   * directly.
   */
  async decideBatch(tier: RateTier, credential: string, tools: (string | null)[]): Promise<RateDecision> {
    const now = Date.now();
    const end = this.endOf(now);
    const resetMs = end + 1 - now;
    const calls = new Map<string, number>();
    for (const tool of tools) if (tool !== null) calls.set(tool, (calls.get(tool) ?? 0) + 1);
    const byAmount = new Map<number, QuotaWindow[]>();
    const add = (amount: number, window: QuotaWindow) => {
      const same = byAmount.get(amount);
      if (same) same.push(window);
      else byAmount.set(amount, [window]);
    };
    add(Math.max(1, tools.length), this.windowsAt(tier, credential, null, end)[0]!);
    for (const [tool, n] of calls) add(n, this.windowsAt(tier, credential, tool, end)[1]!);
    const taken: { store: Cache; keys: string[]; amount: number }[] = [];
    let limit = 0;
    let remaining = Number.POSITIVE_INFINITY;
    let kept = false;
    try {
      for (const [amount, windows] of byAmount) {
        const { store, result } = await this.debitAnywhere(windows, amount);
        if (!result.ok) {
          const refusing = windows[result.refusedBy!]!;
          // What is left of the budget that refused (a smaller batch, or single calls, may still fit).
          const left = Math.max(0, refusing.limit - result.counts[result.refusedBy!]!);
          return { allowed: false, limit: refusing.limit, remaining: left, resetMs };
        }
        taken.push({ store, keys: windows.map((w) => w.key), amount });
        windows.forEach((w, i) => {
          if (w.limit - result.counts[i]! < remaining) {
            remaining = w.limit - result.counts[i]!;
            limit = w.limit;
          }
        });
      }
      kept = true;
      return { allowed: true, limit, remaining, resetMs };
    } finally {
      // Refused, or a step threw (a refused script, a bug): the batch is not served, nothing stays taken.
      if (!kept) await this.giveBack(taken);
    }
  }

  /** Gives back what the steps of a batch took; one that fails is logged, the others still go back. */
  private async giveBack(taken: { store: Cache; keys: string[]; amount: number }[]): Promise<void> {
    for (const { store, keys, amount } of taken) {
      await store.releaseWindows(keys, amount).catch((err: unknown) => {
        this.logger?.warn(
          { err, keys, amount },
          'rate limit: a refused batch could not give back what it took (counted until the window ends)',
        );
      });
    }
  }

  /** A debit on Redis, else (embedded defaults, an outage) in this process; with the store it went to. */
  private async debitAnywhere(
    windows: QuotaWindow[],
    amount: number,
  ): Promise<{ store: Cache; result: DebitResult }> {
    if (this.shared !== null) {
      try {
        return { store: this.shared, result: await this.shared.debitWindows(windows, amount) };
      } catch (err) {
        if (!(err instanceof CacheUnavailableError)) throw err;
      }
    }
    return { store: this.here, result: this.here.debitWindowsNow(windows, amount) };
  }

  /** A quota subject's windows for its lease's requests (RateWindows): keyed by plan, else anonymous. */
  windowsOf(subject: QuotaSubject, tool: string, now: number): QuotaWindow[] {
    return this.windowsAt(this.tierOf(subject), subject.id, tool, this.endOf(now));
  }

  readonly tierOf = (subject: QuotaSubject): RateTier =>
    subject.kind === 'key' ? subject.plan : 'anonymous';

  /** The last millisecond of the window `now` is in: a counter lives through it, gone when the next starts. */
  private endOf(now: number): number {
    return now + this.windowMs - (now % this.windowMs) - 1;
  }

  /** The credential's window and, for a tool, its share: both ending at `expiresAt`. */
  private windowsAt(
    tier: RateTier,
    credential: string,
    tool: string | null,
    expiresAt: number,
  ): QuotaWindow[] {
    const { allKey, toolKey, all, tool: perTool } = this.tiers[tier];
    const windows: QuotaWindow[] = [{ key: allKey + credential, limit: all, expiresAt }];
    if (tool !== null) windows.push({ key: `${toolKey}${credential}:${tool}`, limit: perTool, expiresAt });
    return windows;
  }
}

/**
 * The rate limit's headers a browser page must be let read (Access-Control-Expose-Headers) to know
 * how much is left and when to retry a 429: on the sign-in paths here, on /mcp (request-guard.ts).
 */
export const RATE_LIMIT_EXPOSED_HEADERS =
  'Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset';

/** The headers speak of the budget that refused, else of the one with the least left. */
function decision(windows: QuotaWindow[], result: DebitResult, resetMs: number): RateDecision {
  if (!result.ok) return { allowed: false, limit: windows[result.refusedBy!]!.limit, remaining: 0, resetMs };
  let tightest = 0;
  for (let i = 1; i < windows.length; i++)
    if (windows[i]!.limit - result.counts[i]! < windows[tightest]!.limit - result.counts[tightest]!)
      tightest = i;
  const { limit } = windows[tightest]!;
  return { allowed: true, limit, remaining: limit - result.counts[tightest]!, resetMs };
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The MCP tool an HTTP route is by another name: a call takes that tool's share on either channel,
     * one budget (POST /api/search took only the credential's, twice MCP search_knowledge's).
     */
    tool?: string;
  }
}

/**
 * The tool a request calls: from the /x402/<tool> path, its route's `tool` (none for a request that
 * matched no route, a wrong method's 405 too), or a tools/call on /mcp.
 */
function toolOf(path: string, route: string | undefined, body: unknown): string | null {
  if (path.startsWith('/x402/')) return path.slice('/x402/'.length) || null;
  if (route !== undefined) return route;
  return isMcpPath(path) ? toolCalled(body) : null;
}

/** The tool a JSON-RPC message calls (tools/call with a string name), else null. */
function toolCalled(message: unknown): string | null {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) return null;
  const { method, params } = message as { method?: unknown; params?: { name?: unknown } | null };
  if (method === 'tools/call' && typeof params?.name === 'string') return params.name.slice(0, 64);
  return null;
}

const isMcpPath = (path: string): boolean => path === '/mcp' || path === SIGNIN_MCP_PATH;

interface RateLimitPluginDeps {
  limiter: RateLimiter;
  quota: QuotaMeter;
  /** Called on every refusal (a metric). */
  onRefused?: (tier: RateTier, channel: 'http' | 'mcp') => void;
  /**
   * Whether the MCP route refuses a request's JSON-RPC batch whole by its envelope (an empty batch,
   * one on a revision without batches, a message that is not JSON-RPC) or its size (more messages
   * than a batch may hold): asked before debiting it.
   */
  refusesBatch?: (request: FastifyRequest) => boolean;
}

/**
 * Limits every product route, HTTP and MCP, with RateLimit-* headers; a refusal is 429 with Retry-After
 * in its channel's shape. Taken in a preValidation hook (root-level, so before every route's own: its
 * auth hook, then its schema): a malformed or unauthenticated request is limited like any other and its
 * refusal carries the headers; the body is parsed by then, so an MCP call's tool is known. A request
 * answered with an error before that (a body that cannot be read: not JSON, too large, not JSON's media
 * type) is counted on its way to the error handler (onError), against its credential alone, and carries
 * the headers; past the budget it keeps its own answer (Remaining 0): its body was read already, a 429
 * would spare nothing. A JSON-RPC batch on the MCP path takes one per message and each tools/call from
 * its tool's share, refused whole (429) when it does not fit now: RateLimit-Remaining then tells what is
 * left; one that could never fit, or that its route refuses by its envelope, is one request (limitBatch).
 * A refused key is limited as its client address (made-up keys buy no budget). Callback hooks: no
 * promise when in-process.
 */
export function rateLimitPlugin(deps: RateLimitPluginDeps): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    app.addHook('preValidation', (request, reply, done) => {
      const raw = callerPath(request);
      if (raw === null) return done();
      const caller: Caller | null = request.caller ?? request.callerRefused?.caller ?? null;
      if (caller === null) return done(new Error('the rate limit runs after the caller hook (callerPlugin)'));
      const path = routedPath(request, raw);
      // The sign-in paths take from a budget of their own, never the product's.
      const signin = isSignInPath(path);
      const tier = signin ? 'signin' : deps.limiter.tierOf(caller.subject);
      const body = request.body;
      if (Array.isArray(body) && isMcpPath(path))
        return limitBatch(deps, request, reply, done, path, caller, tier, body);
      const decision = deps.limiter.decide(
        tier,
        caller.subject.id,
        toolOf(path, request.routeOptions.config?.tool, body),
      );
      if (decision instanceof Promise)
        decision.then((d) => applyDecision(deps, request, reply, done, path, caller, tier, d), done);
      else applyDecision(deps, request, reply, done, path, caller, tier, decision);
    });
    // An error before the hook above (an unreadable body): counted, with the headers, never refused here.
    app.addHook('onError', (request, reply, _error, done) => {
      const caller = request.caller ?? request.callerRefused?.caller ?? null;
      const raw = callerPath(request);
      if (caller === null || reply.hasHeader('ratelimit-limit') || raw === null) return done();
      const path = routedPath(request, raw);
      const tier = isSignInPath(path) ? 'signin' : deps.limiter.tierOf(caller.subject);
      const decision = deps.limiter.decide(tier, caller.subject.id, null);
      if (decision instanceof Promise) {
        decision
          .then((d) => rateHeaders(reply, d))
          .then(
            () => done(),
            () => done(),
          );
        return;
      }
      rateHeaders(reply, decision);
      done();
    });
  };
  // The hooks must reach every route registered beside them, not only this plugin's own.
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}

/**
 * RateLimit-Limit, -Remaining and -Reset of a decision; the whole seconds to its window's end. `raw`:
 * on the Node response too, for a route that hijacks its reply (the OAuth library's endpoints
 * answer on the raw response, without the reply's headers); Fastify's own answer merges them.
 */
function rateHeaders(reply: FastifyReply, decision: RateDecision, raw = false): number {
  const seconds = Math.max(1, Math.ceil(decision.resetMs / 1_000));
  reply.header('ratelimit-limit', decision.limit);
  reply.header('ratelimit-remaining', decision.remaining);
  reply.header('ratelimit-reset', seconds);
  if (raw) {
    reply.raw.setHeader('ratelimit-limit', decision.limit);
    reply.raw.setHeader('ratelimit-remaining', decision.remaining);
    reply.raw.setHeader('ratelimit-reset', seconds);
  }
  return seconds;
}

/**
 * A sign-in path's refusal: RFC 6749's error shape for the endpoints a host's client reads (token,
 * register, revoke, the discovery documents), a page for the ones a person's browser shows
 * (authorize, the consent pages); 429 with Retry-After either way.
 */
function signInRefusal(reply: FastifyReply, path: string, decision: RateDecision, seconds: number): void {
  const error = 'temporarily_unavailable';
  const description = errorMessage(error, { limit: decision.limit, seconds });
  reply.code(ERRORS[error].status).header('retry-after', seconds).header('cache-control', 'no-store');
  if (!isSignInPage(path)) {
    // A browser-based host calls these from its page, which allow any origin (they carry no
    // person's cookie): it reads the refusal and when to retry too.
    reply.headers({
      'access-control-allow-origin': '*',
      'access-control-expose-headers': RATE_LIMIT_EXPOSED_HEADERS,
    });
    return void reply.send({ error, error_description: description });
  }
  // A person's page: a heading, readable on a phone, its own icon (no /favicon.ico asked and
  // refused), in words (the machine's description is the JSON answers').
  reply
    .type('text/html; charset=utf-8')
    .send(
      '<!doctype html><html lang="en"><head><meta charset="utf-8">' +
        '<meta name="viewport" content="width=device-width,initial-scale=1"><link rel="icon" href="data:,">' +
        '<title>Sign-in: too many requests</title></head>' +
        '<body style="font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem">' +
        '<h1>Too many sign-in requests</h1>' +
        `<p>Too many sign-in requests came from your network just now. Please try again in ${seconds} seconds.</p>` +
        '<p>Nothing is wrong with your key or wallet: reload this page then, or start again from your MCP host.</p>' +
        '</body></html>',
    );
}

/**
 * A JSON-RPC batch on the MCP path: as many requests as it has messages, each tools/call also one
 * of its tool's share (decideBatch). A batch refused whole before any of it runs is one request,
 * like any other malformed one, and keeps its 400 past the budget (Remaining 0 then): one its
 * route refuses (answered by the route: its envelope, or more messages than a batch may hold,
 * BATCH_TOO_LARGE too), and one larger than the caller's limit or a tool's
 * share, which no window could take (answered here, BATCH_TOO_LARGE): a 429 would have it retried
 * forever.
 */
function limitBatch(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  done: (err?: Error) => void,
  path: string,
  caller: Caller,
  tier: RateTier,
  body: unknown[],
): void {
  const credential = caller.subject.id;
  if (deps.refusesBatch?.(request)) {
    countOne(deps, tier, credential, done, (d) => {
      rateHeaders(reply, d);
      done();
    });
    return;
  }
  const tools = body.map(toolCalled);
  const oversized = deps.limiter.batchTooLarge(tier, tools);
  if (oversized === null) {
    deps.limiter
      .decideBatch(tier, credential, tools)
      .then((d) => applyDecision(deps, request, reply, done, path, caller, tier, d), done);
    return;
  }
  countOne(deps, tier, credential, done, (d) => {
    rateHeaders(reply, d);
    const code = 'BATCH_TOO_LARGE';
    const what = oversized.tool === null ? 'messages' : `calls of ${oversized.tool}`;
    const bound = `can never fit a rate limit of ${oversized.limit} per window`;
    const message = errorMessage(code, { size: oversized.size, what, bound, limit: oversized.limit });
    // The caller is known here: its figures ride in the error as on the route's own 400s (the batch cap's too).
    undebitedService(deps.quota, caller)
      .then((service) => {
        reply.code(ERRORS[code].status).send({
          jsonrpc: '2.0',
          id: null,
          error: { code: ERRORS[code].rpc, message, data: { code, _service: service } },
        });
      })
      .catch(done);
  });
}

/** A batch refused whole counts as one request: its decision, handed to `then` (errors to `done`). */
function countOne(
  deps: RateLimitPluginDeps,
  tier: RateTier,
  credential: string,
  done: (err?: Error) => void,
  then: (decision: RateDecision) => void,
): void {
  const one = deps.limiter.decide(tier, credential, null);
  if (one instanceof Promise) one.then(then, done);
  else then(one);
}

/** The decision's headers, then the request goes on or is refused (module-level, as settleCaller). */
function applyDecision(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  done: (err?: Error) => void,
  path: string,
  caller: Caller,
  tier: RateTier,
  decision: RateDecision,
) {
  const seconds = rateHeaders(reply, decision, tier === 'signin');
  if (decision.allowed) return done();
  // A refusal is answered here, and the callback is then not called (Fastify's rule).
  const mcp = isMcpPath(path);
  deps.onRefused?.(tier, mcp ? 'mcp' : 'http');
  if (tier === 'signin') return void signInRefusal(reply, path, decision, seconds);
  const code = 'RATE_LIMITED';
  const { status, rpc, retryable } = ERRORS[code];
  const message = errorMessage(code, { limit: decision.limit, seconds });
  undebitedService(deps.quota, caller)
    .then((service) => {
      // Never reused: the next call may be served (openapi.ts declares it on every 429).
      reply.code(status).header('retry-after', seconds).header('cache-control', 'no-store');
      const rest = { retryable, retry_after_ms: decision.resetMs, _service: service };
      // The HTTP body is the JSON-RPC error's data with the message after the code.
      if (!mcp) return void reply.send({ code, message, ...rest });
      const id = (request.body as { id?: unknown } | null)?.id;
      reply.send({
        jsonrpc: '2.0',
        id: typeof id === 'string' || typeof id === 'number' ? id : null,
        error: { code: rpc, message, data: { code, ...rest } },
      });
    })
    .catch(done);
}
