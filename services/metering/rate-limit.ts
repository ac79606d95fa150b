import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { refusedByRedis } from '../../adapters/cache/redis-replies.ts';
import { TurnBatch } from '../../adapters/cache/turn-batch.ts';
import type { Config } from '../../contracts/config.ts';
import { ERRORS, errorMessage } from '../../contracts/errors.ts';
import type { Plan } from '../../contracts/events.ts';
import { SIGNIN_MCP_PATH } from '../../contracts/oauth.ts';
import { BUDGET_SHARE, Budget, type Lease, MIN_UNITS } from './budget.ts';
import { type Caller, decorateCaller, UNLIMITED_PATHS, undebitedService } from './caller.ts';
import type { QuotaMeter } from './quota-meter.ts';

/** Who a request is limited as: an applied key by its plan, anyone else by client address. */
export type RateTier = Plan | 'anonymous';

export type RateLimitSettings = Pick<
  Config,
  | 'RATE_LIMIT_ENABLED'
  | 'RATE_LIMIT_WINDOW_MS'
  | 'RATE_LIMIT_ANONYMOUS'
  | 'RATE_LIMIT_FREE'
  | 'RATE_LIMIT_STARTER'
  | 'RATE_LIMIT_PRO'
  | 'RATE_LIMIT_TOOL_SHARE'
  | 'RATE_LIMIT_LEASE_MAX'
>;

export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Until the window that refused (or the credential's window) starts afresh. */
  resetMs: number;
}

/**
 * Takes one request for each of several: ARGV[1] the window (ms), then per request its number of
 * budgets n and their limits, its budgets being the next n of KEYS. Each takes one from its
 * budgets in order (a fixed window opened by its first take), stopping after the first that
 * refuses. Reply: {count, ms left} per budget, {0, -1} for one not reached. One script per turn,
 * each request still decided atomically against the counts every replica shares.
 */
const TAKE_MANY_SCRIPT = `
local window = tonumber(ARGV[1])
local reply = {}
local k = 0
local a = 2
while a <= #ARGV do
  local budgets = tonumber(ARGV[a])
  local refused = false
  for b = 1, budgets do
    k = k + 1
    local count = 0
    local ttl = -1
    if not refused then
      count = redis.call('INCR', KEYS[k])
      ttl = redis.call('PTTL', KEYS[k])
      if ttl < 0 then
        redis.call('PEXPIRE', KEYS[k], window)
        ttl = window
      end
      refused = count > tonumber(ARGV[a + b])
    end
    reply[#reply + 1] = count
    reply[#reply + 1] = ttl
  end
  a = a + budgets + 1
end
return reply`;

/**
 * Grants a lease on every budget of KEYS, all or none: ARGV[1] units at most, each budget reached
 * already (its key exists) with more than ARGV[2] ms left, and at most 1/ARGV[3] of what its limit
 * (ARGV[4 + i]) has left; none when fewer than ARGV[4] would fit. Reply: {units granted, then
 * count and ms left per budget}.
 */
const GRANT_SCRIPT = `
local units = tonumber(ARGV[1])
for i = 1, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if redis.call('PTTL', KEYS[i]) <= tonumber(ARGV[2]) then units = 0 end
  units = math.min(units, math.floor((tonumber(ARGV[4 + i]) - count) / tonumber(ARGV[3])))
end
if units < tonumber(ARGV[4]) then units = 0 end
local reply = {units}
for i = 1, #KEYS do
  if units > 0 then redis.call('INCRBY', KEYS[i], units) end
  reply[#reply + 1] = tonumber(redis.call('GET', KEYS[i]) or '0')
  reply[#reply + 1] = redis.call('PTTL', KEYS[i])
end
return reply`;

/**
 * Gives back a lease's unused units: KEYS its budgets, ARGV[1] the units, then per key the most
 * time its window can have left. Nothing on a key that is gone, counts fewer than the units, or
 * has more time left than the lease's window could (a new window's key).
 */
const RETURN_SCRIPT = `
local units = tonumber(ARGV[1])
for i = 1, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if ttl > 0 and ttl <= tonumber(ARGV[1 + i]) and count >= units then
    redis.call('DECRBY', KEYS[i], units)
  end
end
return 1`;

type TakingRedis = Redis & {
  signalRateTakeMany(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
  signalRateGrant(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
  signalRateReturn(numKeys: number, ...args: (string | number)[]): Promise<number>;
};

/** Requests decided by one script at most; a larger turn's takes go out in several. */
export const MAX_TAKES_PER_SCRIPT = 128;

interface PendingTake {
  keys: string[];
  limits: number[];
  resolve(reply: number[]): void;
  reject(err: unknown): void;
}

/** What a request's budgets are counted by: who (tier and credential) and which tool. */
interface RateShape {
  tier: RateTier;
  credential: string;
  tool: string | null;
}

/** A rate lease: units counted on every budget of one request shape (credential, tool) ahead of its requests. */
interface RateLease extends Lease {
  keys: string[];
  limits: number[];
  /** Each budget's count at the grant, units included. */
  counts: number[];
  /** When the earliest window ends at the earliest (monotonic), counted from before the grant was sent. */
  resetsAt: number;
  /** When each window ends at the latest (monotonic), counted from the reply. */
  endsBy: number[];
}

/** No lease is granted nor used this close to its window's end; a window within twice it takes none. */
const LEASE_GUARD_MS = 1_000;
/** A give-back allows this for the grant's round trip: a key with more time left is a new window's. */
const RETURN_SLACK_MS = 100;
/** A rate lease covers this much of its requests at their recent rate. */
const RATE_LEASE_MS = 1_000;

interface Window {
  count: number;
  resetsAt: number;
}

/** A credential's window over everything it calls, and its windows per tool (each opened by its first request). */
interface Credential extends Window {
  tools: Map<string, Window> | null;
}

/**
 * Fixed windows counted in this process (no Redis, or Redis out of reach): every request counts,
 * refused ones too, and ended windows are swept once per window length. Synchronous on purpose.
 */
class LocalWindows {
  private readonly credentials = new Map<string, Credential>();
  private nextSweep = 0;

  constructor(private readonly windowMs: number) {}

  take(credential: string, tool: string | null, limits: { all: number; perTool: number }, now: number) {
    if (now >= this.nextSweep) this.sweep(now);
    let own = this.credentials.get(credential);
    if (own === undefined) {
      own = { count: 0, resetsAt: 0, tools: null };
      this.credentials.set(credential, own);
    }
    const overall = this.count(own, limits.all, now);
    if (!overall.allowed || tool === null) return overall;
    own.tools ??= new Map();
    let window = own.tools.get(tool);
    if (window === undefined) {
      window = { count: 0, resetsAt: 0 };
      own.tools.set(tool, window);
    }
    return tighter(overall, this.count(window, limits.perTool, now));
  }

  private count(window: Window, limit: number, now: number): RateDecision {
    if (window.resetsAt <= now) {
      window.count = 0;
      window.resetsAt = now + this.windowMs;
    }
    window.count++;
    return {
      allowed: window.count <= limit,
      limit,
      remaining: Math.max(0, limit - window.count),
      resetMs: window.resetsAt - now,
    };
  }

  private sweep(now: number): void {
    for (const [key, own] of this.credentials) {
      if (own.tools !== null) {
        for (const [tool, window] of own.tools) if (window.resetsAt <= now) own.tools.delete(tool);
        if (own.tools.size === 0) own.tools = null;
      }
      if (own.resetsAt <= now && own.tools === null) this.credentials.delete(key);
    }
    this.nextSweep = now + this.windowMs;
  }
}

/**
 * Request-rate limits per credential, shared by every replica through Redis when the cache is
 * Redis (in-process while Redis is out of reach, so an outage neither opens the gate nor closes
 * the service), in-process on the embedded defaults. Two budgets per request: the credential's,
 * and the credential's per tool. On Redis the takes of one turn go out in one script call (one
 * per request cost more than the counting: bench/rate-limit.bench.ts), and a busy request shape
 * is decided from a Budget lease with no round trip.
 */
export class RateLimiter {
  private readonly local = new Map<RateTier, LocalWindows>();
  private readonly windowMs: number;
  private readonly redis: TakingRedis | null;
  private readonly limits: Record<RateTier, { all: number; perTool: number }>;
  private readonly takes = new TurnBatch<PendingTake>((batch) => this.send(batch), MAX_TAKES_PER_SCRIPT);
  private readonly budget: Budget<RateLease, RateShape>;
  /** No lease is granted before this (monotonic): a grant lost on the way may have run in Redis. */
  private pausedUntil = 0;
  /** A server that came back may have lost the leased units' counts: the leases are forgotten. */
  private readonly onReady = () => this.budget.forget();

  constructor(
    settings: RateLimitSettings,
    private readonly store: { redis: Redis; prefix: string } | null,
  ) {
    this.redis = store ? (store.redis as TakingRedis) : null;
    this.windowMs = Math.max(1, settings.RATE_LIMIT_WINDOW_MS);
    const leases = this.redis !== null && this.windowMs > 2 * LEASE_GUARD_MS;
    this.budget = new Budget<RateLease, RateShape>(
      { ms: leases ? RATE_LEASE_MS : 0, maxUnits: settings.RATE_LIMIT_LEASE_MAX },
      {
        grant: (lease, units) => this.grant(lease, units),
        giveBack: (lease) => this.giveBack(lease),
        // Neither used nor kept in its window's last LEASE_GUARD_MS: its units would outlive it.
        fits: (lease) => lease.size === 0 || lease.resetsAt - performance.now() > LEASE_GUARD_MS,
        make: (base, { tier, credential, tool }) => ({
          ...base,
          keys: this.sharedKeys(tier, credential, tool),
          limits: this.limitsOf(tier, tool),
          counts: [],
          resetsAt: Number.POSITIVE_INFINITY,
          endsBy: [],
        }),
        holds: () => true,
      },
      () => performance.now(),
    );
    const limits = (all: number) => ({
      all,
      perTool: Math.max(1, Math.ceil(all * settings.RATE_LIMIT_TOOL_SHARE)),
    });
    this.limits = {
      anonymous: limits(settings.RATE_LIMIT_ANONYMOUS),
      free: limits(settings.RATE_LIMIT_FREE),
      starter: limits(settings.RATE_LIMIT_STARTER),
      pro: limits(settings.RATE_LIMIT_PRO),
    };
    if (this.redis) {
      for (const [name, lua] of [
        ['signalRateTakeMany', TAKE_MANY_SCRIPT],
        ['signalRateGrant', GRANT_SCRIPT],
        ['signalRateReturn', RETURN_SCRIPT],
      ] as const)
        if (typeof this.redis[name] !== 'function') this.redis.defineCommand(name, { lua });
      this.redis.on('ready', this.onReady);
    }
  }

  /** Takes one request from the credential's budget (and the tool's, when one is named). */
  async take(tier: RateTier, credential: string, tool: string | null): Promise<RateDecision> {
    return this.decide(tier, credential, tool);
  }

  /**
   * The decision of one request: at once when this process can make it (its own counters when
   * Redis is out of reach or absent, or a lease's unit), else the promise of Redis's count.
   */
  decide(tier: RateTier, credential: string, tool: string | null): RateDecision | Promise<RateDecision> {
    if (this.redis?.status !== 'ready') return this.takeLocal(tier, credential, tool);
    const lease = this.budget.lease(`${tier}:${credential}`, tool ?? '', false, { tier, credential, tool });
    if (lease !== undefined && this.budget.take(lease, leftOf(lease.limits, lease.counts)))
      return leased(lease);
    return this.takeShared(tier, credential, tool, lease);
  }

  private async takeShared(
    tier: RateTier,
    credential: string,
    tool: string | null,
    lease: RateLease | undefined,
  ): Promise<RateDecision> {
    const keys = lease?.keys ?? this.sharedKeys(tier, credential, tool);
    const limits = lease?.limits ?? this.limitsOf(tier, tool);
    let reply: number[];
    try {
      reply = await new Promise<number[]>((resolve, reject) =>
        this.takes.add({ keys, limits, resolve, reject }),
      );
    } catch (err) {
      // Redis refusing the script is a bug to surface; an outage (or a server that cannot take
      // writes now) falls back to this process.
      if (refusedByRedis(err)) throw err;
      return this.takeLocal(tier, credential, tool);
    }
    const held = lease?.free ?? 0;
    const budget = (i: number): RateDecision => {
      const count = Number(reply[2 * i]);
      const limit = limits[i]!;
      return {
        allowed: count <= limit,
        limit,
        remaining: count > limit ? 0 : Math.min(limit, limit - count + held),
        resetMs: Math.max(0, Number(reply[2 * i + 1])),
      };
    };
    const overall = budget(0);
    const decision = !overall.allowed || limits.length === 1 ? overall : tighter(overall, budget(1));
    if (lease !== undefined && decision.allowed) this.budget.refill(lease, leftOf(limits, reply, 2));
    return decision;
  }

  /** Gives back every leased unit no request took (a stopping api). */
  async close(): Promise<void> {
    this.redis?.off('ready', this.onReady);
    await this.budget.stop();
  }

  private takeLocal(tier: RateTier, credential: string, tool: string | null): RateDecision {
    let windows = this.local.get(tier);
    if (windows === undefined) {
      windows = new LocalWindows(this.windowMs);
      this.local.set(tier, windows);
    }
    return windows.take(credential, tool, this.limits[tier], Date.now());
  }

  /** The Redis keys of a request's budgets: the credential's, then the tool's (the shape every replica counts on). */
  private sharedKeys(tier: RateTier, credential: string, tool: string | null): string[] {
    const base = `${this.store!.prefix}rl:${tier}:`;
    const own = `${tier}:${credential}`;
    return tool === null ? [`${base}all:${own}`] : [`${base}all:${own}`, `${base}tool:${own}:${tool}`];
  }

  /** A request's limits: the credential's, then the tool's when one is named. */
  private limitsOf(tier: RateTier, tool: string | null): number[] {
    const { all, perTool } = this.limits[tier];
    return tool === null ? [all] : [all, perTool];
  }

  private async grant(lease: RateLease, units: number): Promise<number> {
    const sentAt = performance.now();
    if (sentAt < this.pausedUntil) return 0;
    const args = [units, LEASE_GUARD_MS + this.budget.idleMs, BUDGET_SHARE, MIN_UNITS, ...lease.limits];
    let reply: number[];
    try {
      reply = await this.redis!.signalRateGrant(lease.keys.length, ...lease.keys, ...args);
    } catch (err) {
      if (!refusedByRedis(err)) this.pausedUntil = performance.now() + this.windowMs;
      throw err;
    }
    const now = performance.now();
    const granted = Number(reply[0]);
    if (granted <= 0) return 0;
    lease.counts = lease.keys.map((_, i) => Number(reply[1 + 2 * i]));
    const ttls = lease.keys.map((_, i) => Number(reply[2 + 2 * i]));
    lease.resetsAt = sentAt + Math.min(...ttls);
    lease.endsBy = ttls.map((ttl) => now + ttl);
    lease.pending += granted;
    return granted;
  }

  /** A failure leaves the units counted until the window ends: never more let through, only less. */
  private async giveBack(lease: RateLease): Promise<boolean> {
    const units = lease.free;
    lease.free = 0;
    const now = performance.now();
    if (units === 0 || this.redis?.status !== 'ready' || lease.endsBy.every((at) => at <= now)) return true;
    const args = [units, ...lease.endsBy.map((at) => Math.max(0, Math.ceil(at - now)) + RETURN_SLACK_MS)];
    await this.redis.signalRateReturn(lease.keys.length, ...lease.keys, ...args).catch(() => undefined);
    return true;
  }

  /** Sends a turn's takes in one script call and settles each from its part of the reply. */
  private send(batch: PendingTake[]): void {
    const keys: string[] = [];
    const args: (string | number)[] = [this.windowMs];
    for (const take of batch) {
      keys.push(...take.keys);
      args.push(take.limits.length, ...take.limits);
    }
    this.redis!.signalRateTakeMany(keys.length, ...keys, ...args).then(
      (reply) => {
        let at = 0;
        for (const take of batch) {
          take.resolve(reply.slice(at, at + 2 * take.limits.length));
          at += 2 * take.limits.length;
        }
      },
      (err: unknown) => {
        for (const take of batch) take.reject(err);
      },
    );
  }
}

/** What the tighter of a request's budgets has left, from their counts (every `stride`th of `counts`); none known: nothing. */
function leftOf(limits: readonly number[], counts: readonly number[], stride = 1): number {
  let left = Number.POSITIVE_INFINITY;
  for (let i = 0; i < limits.length; i++)
    left = Math.min(left, limits[i]! - Number(counts[stride * i] ?? limits[i]));
  return left;
}

/** The decision of a request a lease's unit let through: each budget's count as of the grant, less the units still free. */
function leased(lease: RateLease): RateDecision {
  const resetMs = Math.round(lease.resetsAt - performance.now());
  let decision: RateDecision | null = null;
  for (let i = 0; i < lease.keys.length; i++) {
    const limit = lease.limits[i]!;
    const remaining = Math.max(0, limit - (lease.counts[i]! - lease.free));
    const budget: RateDecision = { allowed: true, limit, remaining, resetMs };
    decision = decision === null ? budget : tighter(decision, budget);
  }
  return decision!;
}

/** The headers speak of the tighter budget: the one that refused, or the one nearer its end. */
function tighter(overall: RateDecision, byTool: RateDecision): RateDecision {
  return !byTool.allowed || byTool.remaining < overall.remaining ? byTool : overall;
}

/** The tool a request calls: from the /x402/<tool> path, or a JSON-RPC tools/call on /mcp. */
function toolOf(path: string, body: unknown): string | null {
  if (path.startsWith('/x402/')) return path.slice('/x402/'.length) || null;
  if (isMcpPath(path) && body !== null && typeof body === 'object' && !Array.isArray(body)) {
    const { method, params } = body as { method?: unknown; params?: { name?: unknown } };
    if (method === 'tools/call' && typeof params?.name === 'string') return params.name.slice(0, 64);
  }
  return null;
}

const isMcpPath = (path: string): boolean => path === '/mcp' || path === SIGNIN_MCP_PATH;

export interface RateLimitPluginDeps {
  limiter: RateLimiter;
  quota: QuotaMeter;
  /** Called on every refusal (a metric). */
  onRefused?: (tier: RateTier, channel: 'http' | 'mcp') => void;
}

/**
 * Limits every product route, HTTP and MCP alike, in a preHandler (the MCP body parsed, its tool
 * known), after the caller hook. Every limited answer carries RateLimit-* headers; a refusal is
 * 429 with Retry-After in its channel's shape with `_service`. A key the caller hook refused is
 * limited as its client address, so made-up keys buy no fresh budget. A callback hook: a caller
 * limited in-process or from a lease is decided without a promise.
 */
export function rateLimitPlugin(deps: RateLimitPluginDeps): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    decorateCaller(app);
    app.addHook('preHandler', (request, reply, done) => {
      const query = request.url.indexOf('?');
      const raw = query < 0 ? request.url : request.url.slice(0, query);
      if (request.method === 'OPTIONS' || UNLIMITED_PATHS.has(raw)) return done();
      const refused = request.callerRefused;
      const caller: Caller | null =
        request.caller ??
        (refused === null ? null : { auth: refused.service.auth, subject: refused.anonymous, keyId: null });
      if (caller === null) return done(new Error('the rate limit runs after the caller hook (callerPlugin)'));
      // The path the router answers (it decodes %xx and ends at '#': /m%63p is /mcp), each
      // spelling of a tool's path otherwise a budget of its own.
      const path = /[%#]/.test(raw) ? (request.routeOptions.url ?? raw) : raw;
      const tier: RateTier = caller.keyId === null ? 'anonymous' : caller.auth.tier;
      const tool = toolOf(path, request.body);
      const decision = deps.limiter.decide(tier, caller.subject.id, tool);
      if (decision instanceof Promise)
        decision.then((d) => applyDecision(deps, request, reply, done, path, caller, tier, d), done);
      else applyDecision(deps, request, reply, done, path, caller, tier, decision);
    });
  };
  // The hook must reach every route registered beside it, not only this plugin's own.
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}

/**
 * The decision's headers, then the request goes on or is refused. Module-level rather than a
 * closure made per request: under tsx (npm start, the benches) each closure made per call is
 * named at run time.
 */
function applyDecision(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  done: (err?: Error) => void,
  path: string,
  caller: Caller,
  tier: RateTier,
  decision: RateDecision,
): void {
  const seconds = Math.max(1, Math.ceil(decision.resetMs / 1_000));
  reply.header('ratelimit-limit', decision.limit);
  reply.header('ratelimit-remaining', decision.remaining);
  reply.header('ratelimit-reset', seconds);
  // A refusal is answered here, and the callback is then not called (Fastify's rule).
  if (decision.allowed) done();
  else refuse(deps, request, reply, isMcpPath(path), caller, tier, decision, seconds).catch(done);
}

/** The 429 in the channel's shape (JSON-RPC on the MCP paths), with the caller's quota. */
async function refuse(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  mcp: boolean,
  caller: Caller,
  tier: RateTier,
  decision: RateDecision,
  seconds: number,
): Promise<void> {
  deps.onRefused?.(tier, mcp ? 'mcp' : 'http');
  const service = await undebitedService(deps.quota, caller);
  const { status, rpc, retryable } = ERRORS.RATE_LIMITED;
  const message = errorMessage('RATE_LIMITED', { limit: decision.limit, seconds });
  reply.code(status).header('retry-after', seconds);
  const data = {
    code: 'RATE_LIMITED' as const,
    retryable,
    retry_after_ms: decision.resetMs,
    _service: service,
  };
  // The HTTP body is the JSON-RPC error's data with the message after the code.
  const { code, ...rest } = data;
  if (!mcp) return void reply.send({ code, message, ...rest });
  const id = (request.body as { id?: unknown } | null)?.id;
  reply.send({
    jsonrpc: '2.0',
    id: typeof id === 'string' || typeof id === 'number' ? id : null,
    error: { code: rpc, message, data },
  });
}
