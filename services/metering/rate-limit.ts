import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { refusedByRedis } from '../../adapters/cache/redis-replies.ts';
import { TurnBatch } from '../../adapters/cache/turn-batch.ts';
import type { Config } from '../../contracts/config.ts';
import { ERRORS, errorMessage } from '../../contracts/errors.ts';
import type { Plan } from '../../contracts/events.ts';
import { SIGNIN_MCP_PATH } from '../../contracts/oauth.ts';
import { type Caller, callerPath, decorateCaller, undebitedService } from './caller.ts';
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

type TakingRedis = Redis & {
  signalRateTakeMany(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
};

/** Requests decided by one script at most; a larger turn's takes go out in several. */
export const MAX_TAKES_PER_SCRIPT = 128;

interface PendingTake {
  keys: string[];
  limits: readonly number[];
  resolve(reply: number[]): void;
  reject(err: unknown): void;
}

/**
 * Request-rate limits per credential, shared by every replica through Redis when the cache is
 * Redis (in-process while Redis is out of reach, so an outage neither opens the gate nor closes
 * the service), in-process on the embedded defaults. Two budgets per request: the credential's,
 * and the credential's per tool. On Redis the takes of one turn go out in one script call (one
 * per request cost more than the counting: bench/rate-limit.bench.ts). No lease: prepaying a busy
 * request shape's units gained under 15 % against this pipelined round trip (bench/budget.bench.ts).
 */
export class RateLimiter {
  private readonly windowMs: number;
  private readonly redis: TakingRedis | null;
  /**
   * Per tier: the start of its credential's and its tools' budget keys (the tier in each spelt
   * once, here), and the limits of a request without a tool and with one.
   */
  private readonly tiers: Record<
    RateTier,
    { allKey: string; toolKey: string; all: readonly number[]; withTool: readonly number[] }
  >;
  /** Fixed windows counted in this process (no Redis, or Redis out of reach). */
  private readonly local = new Map<string, { count: number; resetsAt: number }>();
  private nextSweep = 0;
  private readonly takes = new TurnBatch<PendingTake>((batch) => this.send(batch), MAX_TAKES_PER_SCRIPT);

  constructor(settings: RateLimitSettings, store: { redis: Redis; prefix: string } | null) {
    this.redis = store ? (store.redis as TakingRedis) : null;
    this.windowMs = Math.max(1, settings.RATE_LIMIT_WINDOW_MS);
    const tier = (name: RateTier, all: number) => {
      const perTool = Math.max(1, Math.ceil(all * settings.RATE_LIMIT_TOOL_SHARE));
      const base = `${store?.prefix ?? ''}rl:${name}:`;
      return {
        allKey: `${base}all:${name}:`,
        toolKey: `${base}tool:${name}:`,
        all: Object.freeze([all]),
        withTool: Object.freeze([all, perTool]),
      };
    };
    this.tiers = {
      anonymous: tier('anonymous', settings.RATE_LIMIT_ANONYMOUS),
      free: tier('free', settings.RATE_LIMIT_FREE),
      starter: tier('starter', settings.RATE_LIMIT_STARTER),
      pro: tier('pro', settings.RATE_LIMIT_PRO),
    };
    if (this.redis && typeof this.redis.signalRateTakeMany !== 'function')
      this.redis.defineCommand('signalRateTakeMany', { lua: TAKE_MANY_SCRIPT });
  }

  /**
   * Takes one request from the credential's budget (and the tool's, when one is named): decided
   * at once from this process's own counters when Redis is out of reach or absent, else the
   * promise of Redis's count.
   */
  decide(tier: RateTier, credential: string, tool: string | null): RateDecision | Promise<RateDecision> {
    const { allKey, toolKey, all, withTool } = this.tiers[tier];
    // The credential's budget, then the tool's: the keys every replica counts on.
    const own = allKey + credential;
    const keys = tool === null ? [own] : [own, `${toolKey}${credential}:${tool}`];
    const limits = tool === null ? all : withTool;
    if (this.redis?.status !== 'ready') return decision(limits, this.takeHere(keys, limits));
    return new Promise<number[]>((resolve, reject) => this.takes.add({ keys, limits, resolve, reject })).then(
      (reply) => decision(limits, reply),
      (err: unknown) => {
        // Redis refusing the script is a bug to surface; an outage (or a server that cannot take
        // writes now) falls back to this process.
        if (refusedByRedis(err)) throw err;
        return decision(limits, this.takeHere(keys, limits));
      },
    );
  }

  /**
   * The script's reply for one request's budgets `keys`, counted in this process by the script's
   * rule: every request counts, refused ones too; ended windows are swept once per window length.
   * Synchronous on purpose.
   */
  private takeHere(keys: readonly string[], limits: readonly number[]): number[] {
    const now = Date.now();
    if (now >= this.nextSweep) {
      for (const [key, window] of this.local) if (window.resetsAt <= now) this.local.delete(key);
      this.nextSweep = now + this.windowMs;
    }
    const reply: number[] = [];
    let refused = false;
    for (let i = 0; i < keys.length; i++) {
      if (refused) {
        reply.push(0, -1);
        continue;
      }
      let window = this.local.get(keys[i]!);
      if (window === undefined || window.resetsAt <= now) {
        window = { count: 0, resetsAt: now + this.windowMs };
        this.local.set(keys[i]!, window);
      }
      window.count++;
      refused = window.count > limits[i]!;
      reply.push(window.count, window.resetsAt - now);
    }
    return reply;
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

/**
 * A request's decision from the script's reply ({count, ms left} per budget): the headers speak of
 * the tighter budget, the one that refused or the one nearer its end.
 */
function decision(limits: readonly number[], reply: readonly number[]): RateDecision {
  let tighter: RateDecision | undefined;
  for (let i = 0; i < limits.length; i++) {
    const count = Number(reply[2 * i]);
    const limit = limits[i]!;
    const remaining = Math.max(0, limit - count);
    if (tighter !== undefined && count <= limit && remaining >= tighter.remaining) continue;
    tighter = { allowed: count <= limit, limit, remaining, resetMs: Math.max(0, Number(reply[2 * i + 1])) };
    if (!tighter.allowed) break;
  }
  return tighter!;
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
 * limited in-process is decided without a promise.
 */
export function rateLimitPlugin(deps: RateLimitPluginDeps): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    decorateCaller(app);
    app.addHook('preHandler', (request, reply, done) => {
      const raw = callerPath(request);
      if (raw === null) return done();
      const caller: Caller | null = request.caller ?? request.callerRefused?.caller ?? null;
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
 * The decision's headers, then the request goes on, or is refused with a 429 in its channel's
 * shape (JSON-RPC on the MCP paths) carrying the caller's quota. Module-level, as settleCaller.
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
  if (decision.allowed) {
    done();
    return;
  }
  // A refusal is answered here, and the callback is then not called (Fastify's rule).
  const mcp = isMcpPath(path);
  deps.onRefused?.(tier, mcp ? 'mcp' : 'http');
  const { status, rpc, retryable } = ERRORS.RATE_LIMITED;
  const message = errorMessage('RATE_LIMITED', { limit: decision.limit, seconds });
  undebitedService(deps.quota, caller)
    .then((service) => {
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
    })
    .catch(done);
}
