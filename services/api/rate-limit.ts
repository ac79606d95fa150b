import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { Config } from '../../contracts/config.ts';
import type { Plan } from '../../contracts/events.ts';
import type { KeyResolver } from '../keys/key-resolver.ts';
import type { QuotaMeter } from '../quota/quota-meter.ts';
import { type Caller, CallerRejectedError, identifyCaller } from './caller.ts';
import type { ServiceMeta } from './service-meta.ts';

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

/** Requests a tier may make per window, and per tool within it. */
export function tierLimits(settings: RateLimitSettings, tier: RateTier): { all: number; perTool: number } {
  const all = {
    anonymous: settings.RATE_LIMIT_ANONYMOUS,
    free: settings.RATE_LIMIT_FREE,
    starter: settings.RATE_LIMIT_STARTER,
    pro: settings.RATE_LIMIT_PRO,
  }[tier];
  return { all, perTool: Math.max(1, Math.ceil(all * settings.RATE_LIMIT_TOOL_SHARE)) };
}

/**
 * Takes one request from each budget KEYS[i] in order (a fixed window of ARGV[1] ms, limit
 * ARGV[i + 1]), stopping after the first that refuses so a refused request takes nothing from
 * the budgets after it. Reply: {count, ms left in the window} per budget visited.
 */
const TAKE_SCRIPT = `
local window = tonumber(ARGV[1])
local reply = {}
for i, key in ipairs(KEYS) do
  local count = redis.call('INCR', key)
  local ttl = window
  if count == 1 then
    redis.call('PEXPIRE', key, window)
  else
    ttl = redis.call('PTTL', key)
    if ttl < 0 then
      redis.call('PEXPIRE', key, window)
      ttl = window
    end
  end
  reply[2 * i - 1] = count
  reply[2 * i] = ttl
  if count > tonumber(ARGV[i + 1]) then return reply end
end
return reply`;

type TakingRedis = Redis & {
  signalRateTake(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
};

/**
 * Request-rate limits per credential, shared by every replica through Redis when the cache is
 * Redis (a per-process memory limiter stands in while Redis is unreachable, so an outage neither
 * opens the gate nor closes the service), in-process on the embedded defaults. Two budgets per
 * request: the credential's, over everything it calls, and the credential's per tool, so one
 * expensive tool cannot use up the whole window.
 *
 * On Redis both budgets are taken by one script in one round trip: rate-limiter-flexible's
 * RateLimiterRedis takes one key per call, two sequential round trips per tool call on the keyed
 * hot path (bench/rate-limit.bench.ts). The in-process limiters are still rate-limiter-flexible's.
 */
export class RateLimiter {
  private readonly limiters = new Map<string, RateLimiterMemory>();
  private readonly redis: TakingRedis | null;

  constructor(
    private readonly settings: RateLimitSettings,
    private readonly store: { redis: Redis; prefix: string } | null,
  ) {
    this.redis = store ? (store.redis as TakingRedis) : null;
    if (this.redis && typeof this.redis.signalRateTake !== 'function')
      this.redis.defineCommand('signalRateTake', { lua: TAKE_SCRIPT });
  }

  private memory(name: string, points: number): RateLimiterMemory {
    const existing = this.limiters.get(name);
    if (existing) return existing;
    const duration = Math.max(1, Math.ceil(this.settings.RATE_LIMIT_WINDOW_MS / 1_000));
    const limiter = new RateLimiterMemory({ keyPrefix: `rl:${name}`, points, duration });
    this.limiters.set(name, limiter);
    return limiter;
  }

  /** Takes one request from the credential's budget (and the tool's, when one is named). */
  async take(tier: RateTier, credential: string, tool: string | null): Promise<RateDecision> {
    const { all, perTool } = tierLimits(this.settings, tier);
    if (this.redis && this.redis.status === 'ready') {
      try {
        return await this.takeShared(tier, credential, tool, all, perTool);
      } catch (err) {
        // Redis refusing the script is a bug to surface; an outage falls back to this process.
        if (err instanceof Error && err.name === 'ReplyError') throw err;
      }
    }
    const overall = await consume(this.memory(`${tier}:all`, all), credential, all);
    if (!overall.allowed || tool === null) return overall;
    const byTool = await consume(this.memory(`${tier}:tool`, perTool), `${credential}:${tool}`, perTool);
    return tighter(overall, byTool);
  }

  private async takeShared(
    tier: RateTier,
    credential: string,
    tool: string | null,
    all: number,
    perTool: number,
  ): Promise<RateDecision> {
    const base = `${this.store!.prefix}rl:${tier}:`;
    const window = Math.max(1, this.settings.RATE_LIMIT_WINDOW_MS);
    const reply =
      tool === null
        ? await this.redis!.signalRateTake(1, `${base}all:${credential}`, window, all)
        : await this.redis!.signalRateTake(
            2,
            `${base}all:${credential}`,
            `${base}tool:${credential}:${tool}`,
            window,
            all,
            perTool,
          );
    const decision = (i: number, limit: number): RateDecision => {
      const count = Number(reply[2 * i]);
      return {
        allowed: count <= limit,
        limit,
        remaining: Math.max(0, limit - count),
        resetMs: Math.max(0, Number(reply[2 * i + 1])),
      };
    };
    const overall = decision(0, all);
    if (!overall.allowed || tool === null) return overall;
    return tighter(overall, decision(1, perTool));
  }
}

/** The headers speak of the tighter budget: the one that refused, or the one nearer its end. */
function tighter(overall: RateDecision, byTool: RateDecision): RateDecision {
  return !byTool.allowed || byTool.remaining < overall.remaining ? byTool : overall;
}

async function consume(limiter: RateLimiterMemory, key: string, limit: number): Promise<RateDecision> {
  try {
    const res = await limiter.consume(key, 1);
    return { allowed: true, limit, remaining: res.remainingPoints, resetMs: res.msBeforeNext };
  } catch (rejection) {
    if (rejection instanceof RateLimiterRes) {
      return { allowed: false, limit, remaining: 0, resetMs: rejection.msBeforeNext };
    }
    throw rejection;
  }
}

/** The tool a request calls: from the /x402/<tool> path, or a JSON-RPC tools/call on /mcp. */
export function toolOf(url: string, body: unknown): string | null {
  const path = url.split('?')[0]!;
  if (path.startsWith('/x402/')) return path.slice('/x402/'.length) || null;
  if (path === '/mcp' && body !== null && typeof body === 'object' && !Array.isArray(body)) {
    const { method, params } = body as { method?: unknown; params?: { name?: unknown } };
    if (method === 'tools/call' && typeof params?.name === 'string') return params.name.slice(0, 64);
  }
  return null;
}

/** Paths never limited: probes and metrics scraped by the platform. */
const UNLIMITED = new Set(['/healthz', '/readyz', '/metrics']);

export interface RateLimitPluginDeps {
  limiter: RateLimiter;
  keys: KeyResolver;
  quota: QuotaMeter;
  logger: Logger;
  /** Called on every refusal (a metric). */
  onRefused?: (tier: RateTier, channel: 'http' | 'mcp') => void;
}

function callerTier(caller: Caller): RateTier {
  return caller.keyId === null ? 'anonymous' : caller.auth.tier;
}

/**
 * Limits every product route, HTTP and MCP alike, before its handler runs (a preHandler, so the
 * MCP body is parsed and its tool known). Every limited answer carries RateLimit-Limit,
 * RateLimit-Remaining and RateLimit-Reset; a refusal is 429 with Retry-After, the error shape of
 * its channel and `_service`. A key that does not resolve is limited as its client address, so
 * rotating made-up keys buys no fresh budget.
 */
export function rateLimitPlugin(deps: RateLimitPluginDeps): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app) => {
    app.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
      const path = request.url.split('?')[0]!;
      if (request.method === 'OPTIONS' || UNLIMITED.has(path)) return;
      let caller: Caller;
      let subject: Caller['subject'];
      try {
        caller = await identifyCaller(deps.keys, { headers: request.headers, clientAddress: request.ip });
        subject = caller.subject;
      } catch (err) {
        if (!(err instanceof CallerRejectedError)) throw err;
        // The route itself answers the refused key (401/-32003); here it counts as its address.
        caller = { auth: err.service.auth, subject: err.anonymous, keyId: null };
        subject = err.anonymous;
      }
      const tier = callerTier(caller);
      const decision = await deps.limiter.take(tier, `${tier}:${subject.id}`, toolOf(path, request.body));
      const resetSeconds = Math.max(1, Math.ceil(decision.resetMs / 1_000));
      reply.header('ratelimit-limit', decision.limit);
      reply.header('ratelimit-remaining', decision.remaining);
      reply.header('ratelimit-reset', resetSeconds);
      if (decision.allowed) return;

      const channel = path === '/mcp' ? 'mcp' : 'http';
      deps.onRefused?.(tier, channel);
      let service: ServiceMeta;
      try {
        service = { auth: caller.auth, quota: await deps.quota.peek(subject) };
      } catch {
        service = { auth: caller.auth, quota: null };
      }
      const message = `rate limit of ${decision.limit} requests per window reached; retry in ${resetSeconds} s`;
      reply.code(429).header('retry-after', resetSeconds);
      if (channel === 'mcp') {
        const id = (request.body as { id?: unknown } | null)?.id;
        return reply.send({
          jsonrpc: '2.0',
          id: typeof id === 'string' || typeof id === 'number' ? id : null,
          error: {
            code: -32000,
            message,
            data: {
              code: 'RATE_LIMITED',
              retryable: true,
              retry_after_ms: decision.resetMs,
              _service: service,
            },
          },
        });
      }
      return reply.send({
        code: 'RATE_LIMITED',
        message,
        retryable: true,
        retry_after_ms: decision.resetMs,
        _service: service,
      });
    });
  };
  // The hook must reach every route registered beside it, not only this plugin's own.
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}
