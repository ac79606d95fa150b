import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { refusedByRedis } from '../../adapters/cache/redis-replies.ts';
import { TurnBatch } from '../../adapters/cache/turn-batch.ts';
import type { Config } from '../../contracts/config.ts';
import { ERRORS, errorMessage } from '../../contracts/errors.ts';
import type { Plan } from '../../contracts/events.ts';
import { SIGNIN_MCP_PATH } from '../../contracts/oauth.ts';
import { BUDGET_IDLE_MS, BUDGET_SHARE, IdleSweeper } from './budget.ts';
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

/** Requests a tier may make per window, and per tool within it. */
function tierLimits(settings: RateLimitSettings, tier: RateTier): { all: number; perTool: number } {
  const all = {
    anonymous: settings.RATE_LIMIT_ANONYMOUS,
    free: settings.RATE_LIMIT_FREE,
    starter: settings.RATE_LIMIT_STARTER,
    pro: settings.RATE_LIMIT_PRO,
  }[tier];
  return { all, perTool: Math.max(1, Math.ceil(all * settings.RATE_LIMIT_TOOL_SHARE)) };
}

/**
 * Takes one request for each of several requests, in order, then grants leases. ARGV[1] is the
 * window (ms), ARGV[2] the number of leased budgets m, ARGV[3] the number of lease groups g,
 * ARGV[4] the least time (ms) a lease's window must have left; then per request its number of
 * budgets n and their limits, its n budgets being the next n of KEYS; then per group its number
 * of budgets and, per budget, the lease's size and the budget's limit, the last m of KEYS being the
 * leased budgets. Each request takes one from its budgets in order (a fixed window: the first take
 * of a key starts it), stopping after the first that refuses, so a refused request takes nothing
 * from the budgets after it. A group's leases (the budgets of one request, used together or not at
 * all) are granted all or none: each budget reached already (its key exists), with 2L left after
 * the requests and more than ARGV[4] ms left in its window; a lease of size L adds L to the count.
 * Reply: {count, ms left in the window} per budget of every request, {0, -1} for a budget not
 * reached; then {units granted, count, ms left} per leased budget. One script per batch, so each
 * request is still decided atomically against the counts every replica shares, in the order the
 * requests were taken.
 */
const TAKE_MANY_SCRIPT = `
local window = tonumber(ARGV[1])
local leases = tonumber(ARGV[2])
local groups = tonumber(ARGV[3])
local guard = tonumber(ARGV[4])
local last = #ARGV - 2 * leases - groups
local reply = {}
local k = 0
local a = 5
local r = 0
local function ttl_of(key)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('PEXPIRE', key, window)
    ttl = window
  end
  return ttl
end
while a <= last do
  local budgets = tonumber(ARGV[a])
  local refused = false
  for b = 1, budgets do
    k = k + 1
    local count = 0
    local ttl = -1
    if not refused then
      local key = KEYS[k]
      count = redis.call('INCR', key)
      if count == 1 then
        redis.call('PEXPIRE', key, window)
        ttl = window
      else
        ttl = ttl_of(key)
      end
      refused = count > tonumber(ARGV[a + b])
    end
    reply[r + 1] = count
    reply[r + 2] = ttl
    r = r + 2
  end
  a = a + budgets + 1
end
for g = 1, groups do
  local n = tonumber(ARGV[a])
  a = a + 1
  local grant = true
  for j = 0, n - 1 do
    local key = KEYS[k + 1 + j]
    local count = tonumber(redis.call('GET', key) or '0')
    local ttl = redis.call('PTTL', key)
    if ttl <= guard or count + 2 * tonumber(ARGV[a + 2 * j]) > tonumber(ARGV[a + 2 * j + 1]) then
      grant = false
    end
  end
  for j = 0, n - 1 do
    local key = KEYS[k + 1 + j]
    local size = tonumber(ARGV[a + 2 * j])
    local granted = 0
    local count
    if grant then
      count = redis.call('INCRBY', key, size)
      granted = size
    else
      count = tonumber(redis.call('GET', key) or '0')
    end
    reply[r + 1] = granted
    reply[r + 2] = count
    reply[r + 3] = redis.call('PTTL', key)
    r = r + 3
  end
  k = k + n
  a = a + 2 * n
end
return reply`;

/**
 * Gives back units of leases nobody used: KEYS the leased budgets, ARGV per key its unused units
 * and the most time (ms) its window can have left. Never below zero, and nothing on a key that is
 * gone (its window ended with the units in it), has more time left than the lease's window
 * could, or counts fewer than the units (a new window's key, after the old one was evicted or the
 * server restarted empty).
 */
const RETURN_SCRIPT = `
for i = 1, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  local units = tonumber(ARGV[2 * i - 1])
  -- The lease's window counted its units: fewer counted is another window's key.
  if ttl > 0 and ttl <= tonumber(ARGV[2 * i]) and count >= units then
    redis.call('DECRBY', KEYS[i], units)
  end
end
return 1`;

type TakingRedis = Redis & {
  signalRateTakeMany(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
  signalRateReturn(numKeys: number, ...args: (string | number)[]): Promise<number>;
};

/** Requests decided by one script at most; a larger turn's takes go out in several. */
export const MAX_TAKES_PER_SCRIPT = 128;

/** One request's take waiting for the script of its turn. */
interface PendingTake {
  keys: string[];
  limits: number[];
  resolve(decision: RateDecision): void;
  reject(err: unknown): void;
}

/**
 * Units of a shared budget counted in Redis ahead of this process's requests, which take them
 * without a round trip until none is left, the window is about to end, or the budget goes quiet.
 */
interface Lease {
  /** Units counted in Redis that no request has taken yet. */
  held: number;
  /** The budget's count in Redis when the units were last granted (they included). */
  count: number;
  limit: number;
  /**
   * When the window ends at the earliest, on the monotonic clock (`performance.now()`): the time
   * left that Redis reported, counted from before the script was sent.
   */
  resetsAt: number;
  /** When the window ends at the latest (monotonic): the time left counted from the reply. */
  endsBy: number;
  lastUse: number;
}

/**
 * A lease is neither granted nor used this close to its window's end: its units would outlive the
 * window. A window this short or shorter than twice it takes no leases.
 */
const LEASE_GUARD_MS = 1_000;
/**
 * What a give-back allows for the round trip that granted the lease: a key with more time left than
 * the lease's window by this much is a new window's, and gets nothing back.
 */
const RETURN_SLACK_MS = 100;

/** When a budget was last sent in a take, and the time before that (monotonic ms). */
interface Sends {
  last: number;
  before: number;
}

/** A lease asked for: its budget's key, its size and the budget's limit. */
interface LeaseAsk {
  key: string;
  size: number;
  limit: number;
}

/** Whether a lease's units may still be taken at `now`: not in its window's last LEASE_GUARD_MS. */
function usable(lease: Lease, now: number): boolean {
  return lease.resetsAt - now > LEASE_GUARD_MS;
}

interface Window {
  count: number;
  resetsAt: number;
}

/**
 * A credential's window over everything it calls, and its windows per tool: each opens at its own
 * first request, as the shared counters' keys do, so a tool's window may outlast the credential's.
 */
interface Credential extends Window {
  /** Made at the credential's first tool call: an address that calls none holds no Map. */
  tools: Map<string, Window> | null;
}

/**
 * Fixed windows counted in this process: a window opens at a credential's first request and lasts
 * the configured time, every request counts (refused ones too, as on Redis), and windows that
 * have ended are swept once per window length, so a flood of addresses does not stay in memory.
 * Synchronous on purpose: the embedded limiter runs on every request, before every route.
 *
 * Kept by the credential's own string, its tools' windows under it: a key made per request
 * (tier, credential and tool joined) was a new string to flatten and hash twice per call, which
 * showed in the keyed MCP profile; a key's subject id is the same string from call to call.
 */
class LocalWindows {
  private readonly credentials = new Map<string, Credential>();
  private nextSweep = 0;

  constructor(private readonly windowMs: number) {}

  /** Takes one from the credential's window, and when it allows, from the tool's; the tighter decides. */
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

  /** Counts one request in `window`, opening it afresh when it has ended. */
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
 * Redis (a per-process memory limiter stands in while Redis is unreachable, so an outage neither
 * opens the gate nor closes the service), in-process on the embedded defaults. Two budgets per
 * request: the credential's, over everything it calls, and the credential's per tool, so one
 * expensive tool cannot use up the whole window.
 *
 * On Redis the takes asked for in one turn of the event loop go out together, in one script call
 * (TAKE_MANY_SCRIPT) sent once the turn's I/O callbacks have run: under load many requests reach
 * the limiter in the same turn, and one script call per request spent more on the call (a command,
 * a write, a reply to parse, a script invocation in Redis) than on the counting itself
 * (bench/rate-limit.bench.ts). Each request is still decided against the shared counts, in the
 * order it asked. In-process, both budgets are plain counters taken without a promise.
 *
 * A busy budget (taken twice in one turn, or while its last count is in flight, or at a rate: see
 * leasesFor) also takes a lease in that script: units counted in Redis ahead of its next requests,
 * which this process then decides with no round trip (`takeNow`) until they run out. Even one
 * script call per turn was 5.9 % of a keyed MCP call's main thread on the Redis path, nearly all
 * the socket write (git log -p bench/README.md). A unit is counted before a request takes it, so replicas
 * together never let more than the limit through; a lease is granted only with twice its size left
 * and more than LEASE_GUARD_MS left in its window, and units no request took go back to Redis once
 * the budget goes quiet (BUDGET_IDLE_MS), so near a limit the units held by one replica refuse
 * another's requests early by at most one lease per budget (until the window ends, for units of a
 * lease that was not given back: a killed process's, or one whose window ended first).
 */
export class RateLimiter {
  /** In-process budgets per tier: each credential's, and each credential's per tool. */
  private readonly local = new Map<
    RateTier,
    { windows: LocalWindows; limits: { all: number; perTool: number } }
  >();
  private readonly windowMs: number;
  private readonly redis: TakingRedis | null;
  private readonly limits: Record<RateTier, { all: number; perTool: number }>;
  /** Takes of this turn not yet sent to Redis, in the order asked: one script call per turn. */
  private readonly takes = new TurnBatch<PendingTake>((batch) => this.send(batch), MAX_TAKES_PER_SCRIPT);
  private readonly leaseMax: number;
  /** Leases by budget key (Redis key). */
  private readonly leases = new Map<string, Lease>();
  /** Budget keys of takes sent to Redis and not answered yet, with how many. */
  private readonly inFlight = new Map<string, number>();
  /** Budget keys whose lease is asked for in a script not answered yet: one at a time. */
  private readonly leasing = new Set<string>();
  /**
   * When each budget was last sent in a take, and the time before (monotonic ms): since
   * `recentSince` in `recent`, the period before in `older`. Turned over every BUDGET_IDLE_MS or
   * more, so what is kept is bounded by the budgets of two periods; one sent longer ago than that
   * is not found, and counts as never sent.
   */
  private recent = new Map<string, Sends>();
  private older = new Map<string, Sends>();
  private recentSince = 0;
  /**
   * No lease is asked for before this time (monotonic): a script that failed on the way (a
   * timeout) may still have run in Redis, its lease counted there and never known here.
   */
  private leasesPausedUntil = 0;
  private readonly sweeper: IdleSweeper;
  /** A server that came back may have lost the leased units' counts: the leases are forgotten. */
  private readonly onReady = () => this.leases.clear();
  /** BUDGET_IDLE_MS unless a test stretches it (so that its timings have room on a loaded machine). */
  private readonly idleMs: number;

  constructor(
    settings: RateLimitSettings,
    private readonly store: { redis: Redis; prefix: string } | null,
    options: { leaseIdleMs?: number } = {},
  ) {
    this.idleMs = options.leaseIdleMs ?? BUDGET_IDLE_MS;
    this.sweeper = new IdleSweeper(this.idleMs, () => {
      void this.giveBack(performance.now(), false);
      return this.leases.size > 0;
    });
    this.redis = store ? (store.redis as TakingRedis) : null;
    this.windowMs = Math.max(1, settings.RATE_LIMIT_WINDOW_MS);
    // A window within twice the guard leaves a lease too little time to be worth its units.
    this.leaseMax = this.windowMs <= 2 * LEASE_GUARD_MS ? 0 : settings.RATE_LIMIT_LEASE_MAX;
    this.limits = {
      anonymous: tierLimits(settings, 'anonymous'),
      free: tierLimits(settings, 'free'),
      starter: tierLimits(settings, 'starter'),
      pro: tierLimits(settings, 'pro'),
    };
    if (this.redis) {
      if (typeof this.redis.signalRateTakeMany !== 'function')
        this.redis.defineCommand('signalRateTakeMany', { lua: TAKE_MANY_SCRIPT });
      if (typeof this.redis.signalRateReturn !== 'function')
        this.redis.defineCommand('signalRateReturn', { lua: RETURN_SCRIPT });
      this.redis.on('ready', this.onReady);
    }
  }

  /**
   * Takes one request from the credential's budget (and the tool's, when one is named). The
   * credential is the caller's subject id: the tier keeps those of different tiers apart.
   */
  async take(tier: RateTier, credential: string, tool: string | null): Promise<RateDecision> {
    if (this.redis && this.redis.status === 'ready') {
      const keys = this.sharedKeys(tier, credential, tool);
      const leased = this.leases.size === 0 ? null : this.takeLeased(keys);
      if (leased !== null) return leased;
      try {
        return await this.takeShared(tier, keys, tool !== null);
      } catch (err) {
        // Redis refusing the script is a bug to surface; an outage falls back to this process,
        // and so does a Redis that answers but cannot take writes now (see refusedByRedis).
        if (refusedByRedis(err)) throw err;
      }
    }
    return this.takeLocal(tier, credential, tool);
  }

  /**
   * The decision without a promise when this process can make it: its own counters decide (no
   * Redis, or Redis out of reach), or every budget of the request has leased units left. Null
   * when the budgets must be counted through Redis.
   */
  takeNow(tier: RateTier, credential: string, tool: string | null): RateDecision | null {
    if (this.redis && this.redis.status === 'ready') {
      return this.leases.size === 0 ? null : this.takeLeased(this.sharedKeys(tier, credential, tool));
    }
    return this.takeLocal(tier, credential, tool);
  }

  /** Gives back every leased unit no request took (a stopping api), and stops looking for idle ones. */
  async close(): Promise<void> {
    this.sweeper.stop();
    this.redis?.off('ready', this.onReady);
    await this.giveBack(performance.now(), true);
  }

  private takeLocal(tier: RateTier, credential: string, tool: string | null): RateDecision {
    let budgets = this.local.get(tier);
    if (budgets === undefined) {
      budgets = { windows: new LocalWindows(this.windowMs), limits: this.limits[tier] };
      this.local.set(tier, budgets);
    }
    return budgets.windows.take(credential, tool, budgets.limits, Date.now());
  }

  /** The Redis keys of a request's budgets: the credential's, then the tool's. */
  private sharedKeys(tier: RateTier, credential: string, tool: string | null): string[] {
    // The tier twice (`rl:pro:all:pro:<id>`): the shape every replica has counted on since the
    // limit was shared, kept so that replicas of both versions count a rollout's window together.
    const base = `${this.store!.prefix}rl:${tier}:`;
    const own = `${tier}:${credential}`;
    return tool === null ? [`${base}all:${own}`] : [`${base}all:${own}`, `${base}tool:${own}:${tool}`];
  }

  /** One unit from the lease of each budget, when each has one; null otherwise (nothing taken). */
  private takeLeased(keys: string[]): RateDecision | null {
    const now = performance.now();
    const held: Lease[] = [];
    for (const key of keys) {
      const lease = this.leases.get(key);
      if (lease === undefined || lease.held < 1 || !usable(lease, now)) return null;
      held.push(lease);
    }
    let decision: RateDecision | null = null;
    for (const lease of held) {
      lease.held--;
      lease.lastUse = now;
      const budget: RateDecision = {
        allowed: true,
        limit: lease.limit,
        remaining: Math.max(0, lease.limit - (lease.count - lease.held)),
        resetMs: Math.round(lease.resetsAt - now),
      };
      decision = decision === null ? budget : tighter(decision, budget);
    }
    return decision;
  }

  /** Counts the request on `keys` (sharedKeys) through Redis, with the other takes of the turn. */
  private takeShared(tier: RateTier, keys: string[], byTool: boolean): Promise<RateDecision> {
    const { all, perTool } = this.limits[tier];
    const limits = byTool ? [all, perTool] : [all];
    return new Promise<RateDecision>((resolve, reject) => {
      this.takes.add({ keys, limits, resolve, reject });
    });
  }

  /** A lease's size for a budget of this limit; 0 when it would be too small to save anything. */
  private leaseSize(limit: number): number {
    const size = Math.min(this.leaseMax, Math.floor(limit / BUDGET_SHARE));
    return size >= 2 ? size : 0;
  }

  /**
   * The leases a batch asks for, in groups (one request's budgets, granted all or none): for a
   * take whose every budget has a usable lease here, or one being asked for, or is busy, the busy
   * ones. Busy: taken more than once in the batch, or while a take of it is in flight, or sent
   * twice in takes within the last BUDGET_IDLE_MS (so this is at least the third request in that
   * time), or taken from a lease here within it. The last two count the rate, not overlap: a key
   * at 60 requests/s whose requests come one at a time never overlapped, and each of them paid a
   * script call (128 keys over 32 connections, bench/scale-out.bench.ts). A pair of requests and
   * then quiet takes no lease: it would cost a give-back for nothing.
   * A budget whose lease is in its window's last LEASE_GUARD_MS counts as neither, so its take
   * asks for nothing.
   */
  private leasesFor(batch: PendingTake[]): LeaseAsk[][] {
    const now = performance.now();
    if (this.leaseMax === 0 || now < this.leasesPausedUntil) return [];
    if (now - this.recentSince >= this.idleMs) {
      this.older = this.recent;
      this.recent = new Map();
      this.recentSince = now;
    }
    const seen = new Map<string, number>();
    for (const take of batch) for (const key of take.keys) seen.set(key, (seen.get(key) ?? 0) + 1);
    const groups: LeaseAsk[][] = [];
    for (const take of batch) {
      const asked: LeaseAsk[] = [];
      let qualifies = true;
      for (let i = 0; i < take.keys.length && qualifies; i++) {
        const key = take.keys[i]!;
        const lease = this.leases.get(key);
        if (this.leasing.has(key) || (lease !== undefined && lease.held > 0 && usable(lease, now))) continue;
        const size = this.leaseSize(take.limits[i]!);
        const sends = this.recent.get(key) ?? this.older.get(key);
        const busy =
          seen.get(key)! > 1 ||
          (this.inFlight.get(key) ?? 0) > 0 ||
          (sends !== undefined && now - sends.before < this.idleMs) ||
          (lease !== undefined && now - lease.lastUse < this.idleMs);
        if (size === 0 || !busy || (lease !== undefined && lease.held > 0)) qualifies = false;
        else asked.push({ key, size, limit: take.limits[i]! });
      }
      if (!qualifies || asked.length === 0) continue;
      for (const lease of asked) this.leasing.add(lease.key);
      groups.push(asked);
    }
    for (const key of seen.keys()) {
      const sends = this.recent.get(key);
      if (sends !== undefined) {
        sends.before = sends.last;
        sends.last = now;
      } else
        this.recent.set(key, { last: now, before: this.older.get(key)?.last ?? Number.NEGATIVE_INFINITY });
    }
    return groups;
  }

  /** Sends a turn's takes in one script call and settles each from its part of the reply. */
  private send(batch: PendingTake[]): void {
    const keys: string[] = [];
    const groups = this.leasesFor(batch);
    const leases = groups.flat();
    // A lease must outlast its round trip and an idle check with room to be used.
    const guard = LEASE_GUARD_MS + this.idleMs;
    const args: (string | number)[] = [this.windowMs, leases.length, groups.length, guard];
    for (const take of batch) {
      for (const key of take.keys) keys.push(key);
      args.push(take.limits.length);
      for (const limit of take.limits) args.push(limit);
    }
    for (const group of groups) {
      args.push(group.length);
      for (const lease of group) {
        keys.push(lease.key);
        args.push(lease.size, lease.limit);
      }
    }
    const sent = keys.slice(0, keys.length - leases.length);
    for (const key of sent) this.inFlight.set(key, (this.inFlight.get(key) ?? 0) + 1);
    const landed = () => {
      for (const lease of leases) this.leasing.delete(lease.key);
      for (const key of sent) {
        const left = (this.inFlight.get(key) ?? 1) - 1;
        if (left > 0) this.inFlight.set(key, left);
        else this.inFlight.delete(key);
      }
    };
    // Before the send: a window's end counted from here is never later than Redis's.
    const sentAt = performance.now();
    this.redis!.signalRateTakeMany(keys.length, ...keys, ...args).then(
      (reply) => {
        landed();
        let at = 0;
        for (const take of batch) {
          const held =
            this.leases.size === 0 ? undefined : take.keys.map((k) => this.leases.get(k)?.held ?? 0);
          take.resolve(decide(reply, at, take.limits, held));
          at += 2 * take.limits.length;
        }
        const now = performance.now();
        for (const lease of leases) {
          this.granted(lease, Number(reply[at]), Number(reply[at + 1]), Number(reply[at + 2]), sentAt, now);
          at += 3;
        }
      },
      (err: unknown) => {
        landed();
        if (leases.length > 0 && !refusedByRedis(err)) {
          this.leasesPausedUntil = performance.now() + this.windowMs;
        }
        for (const take of batch) take.reject(err);
      },
    );
  }

  private granted(
    asked: LeaseAsk,
    units: number,
    count: number,
    ttl: number,
    sentAt: number,
    now: number,
  ): void {
    if (!(units > 0) || !(ttl > 0)) return;
    // A budget is asked for a lease only with none of its units held here: the grant replaces it.
    this.leases.set(asked.key, {
      held: units,
      count,
      limit: asked.limit,
      resetsAt: sentAt + ttl,
      endsBy: now + ttl,
      lastUse: now,
    });
    this.sweeper.watch();
  }

  /**
   * Gives back the units of leases nobody took from for BUDGET_IDLE_MS, or in their window's last
   * LEASE_GUARD_MS (all of them when `all`). A failure leaves them counted until the window ends:
   * never more let through, only less.
   */
  private async giveBack(now: number, all: boolean): Promise<void> {
    const keys: string[] = [];
    const args: number[] = [];
    for (const [key, lease] of this.leases) {
      if (!all && usable(lease, now) && now - lease.lastUse < this.idleMs) continue;
      this.leases.delete(key);
      // Redis gives back only into the lease's own window (RETURN_SCRIPT), however near its end.
      if (lease.held > 0 && lease.endsBy > now) {
        keys.push(key);
        args.push(lease.held, Math.ceil(lease.endsBy - now) + RETURN_SLACK_MS);
      }
    }
    if (keys.length === 0 || !this.redis || this.redis.status !== 'ready') return;
    await this.redis.signalRateReturn(keys.length, ...keys, ...args).catch(() => undefined);
  }
}

/**
 * One request's decision from its part of the script's reply, which starts at `at`. `held[i]`:
 * units of budget i this process holds leased and unused, counted in Redis but not let through,
 * so not taken from what the headers say remains.
 */
function decide(reply: number[], at: number, limits: number[], held?: number[]): RateDecision {
  const budget = (i: number): RateDecision => {
    const count = Number(reply[at + 2 * i]);
    const limit = limits[i]!;
    return {
      allowed: count <= limit,
      limit,
      remaining: count > limit ? 0 : Math.min(limit, limit - count + (held?.[i] ?? 0)),
      resetMs: Math.max(0, Number(reply[at + 2 * i + 1])),
    };
  };
  const overall = budget(0);
  if (!overall.allowed || limits.length === 1) return overall;
  return tighter(overall, budget(1));
}

/** The headers speak of the tighter budget: the one that refused, or the one nearer its end. */
function tighter(overall: RateDecision, byTool: RateDecision): RateDecision {
  return !byTool.allowed || byTool.remaining < overall.remaining ? byTool : overall;
}

/** The tool a request calls: from the /x402/<tool> path, or a JSON-RPC tools/call on /mcp. */
function toolOf(url: string, body: unknown): string | null {
  const query = url.indexOf('?');
  const path = query < 0 ? url : url.slice(0, query);
  if (path.startsWith('/x402/')) return path.slice('/x402/'.length) || null;
  if (isMcpPath(path) && body !== null && typeof body === 'object' && !Array.isArray(body)) {
    const { method, params } = body as { method?: unknown; params?: { name?: unknown } };
    if (method === 'tools/call' && typeof params?.name === 'string') return params.name.slice(0, 64);
  }
  return null;
}

/** The MCP endpoints: /mcp, and /mcp/signin whose callers sign in with OAuth. */
const isMcpPath = (path: string): boolean => path === '/mcp' || path === SIGNIN_MCP_PATH;

/** Characters the router reads other than as themselves in a path: %xx, and '#' ending it. */
const ROUTER_REWRITES = /[%#]/;

/**
 * The path of the route that answers the request: the router decodes %xx and ends a path at '#',
 * so `/m%63p` is `/mcp`. Only such paths pay for the route's options (a getter that builds an
 * object); an unmatched one keeps its raw path.
 */
function routedPath(request: FastifyRequest, raw: string): string {
  return ROUTER_REWRITES.test(raw) ? (request.routeOptions.url ?? raw) : raw;
}

export interface RateLimitPluginDeps {
  limiter: RateLimiter;
  quota: QuotaMeter;
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
    // Who the limit identified a request as (a key that resolved, or none presented), for its
    // route to use instead of asking again; a key it refused is left to the route to answer.
    decorateCaller(app);
    app.addHook('preHandler', limitHook(deps));
  };
  // The hook must reach every route registered beside it, not only this plugin's own.
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}

/**
 * A callback hook, not an async one: it runs before every product route, and a caller limited
 * in-process (the embedded default) or from a lease is decided without a promise. The caller is
 * the one the caller hook resolved (callerPlugin, which must be registered before); a key it
 * refused is limited as its client address, and the route answers the refusal itself.
 */
function limitHook(deps: RateLimitPluginDeps) {
  return (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
    const query = request.url.indexOf('?');
    const raw = query < 0 ? request.url : request.url.slice(0, query);
    if (request.method === 'OPTIONS' || UNLIMITED_PATHS.has(raw)) {
      done();
      return;
    }
    const refused = request.callerRefused;
    const caller: Caller | null =
      request.caller ??
      (refused === null ? null : { auth: refused.service.auth, subject: refused.anonymous, keyId: null });
    if (caller === null) {
      done(
        new Error(
          'the rate limit runs after the caller hook (callerPlugin), which did not resolve this request',
        ),
      );
      return;
    }
    // Read from the raw text, each spelling of a tool's path was a budget of its own, and /m%63p
    // had none (nor the MCP shape of a refusal).
    const path = routedPath(request, raw);
    const tier = callerTier(caller);
    const tool = toolOf(path, request.body);
    const decision = deps.limiter.takeNow(tier, caller.subject.id, tool);
    if (decision !== null) {
      apply(deps, request, reply, path, caller, decision, done);
      return;
    }
    deps.limiter
      .take(tier, caller.subject.id, tool)
      .then((decision) => apply(deps, request, reply, path, caller, decision, done), done);
  };
}

/** Announces the decision's headers and lets the request on, or answers its refusal here. */
function apply(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  path: string,
  caller: Caller,
  decision: RateDecision,
  done: (err?: Error) => void,
): void {
  const resetSeconds = announce(reply, decision);
  // Answered from here on refusal: the callback is then not called (Fastify's rule).
  if (decision.allowed) done();
  else refuse(deps, request, reply, path, caller, decision, resetSeconds).catch(done);
}

function announce(reply: FastifyReply, decision: RateDecision): number {
  const resetSeconds = Math.max(1, Math.ceil(decision.resetMs / 1_000));
  reply.header('ratelimit-limit', decision.limit);
  reply.header('ratelimit-remaining', decision.remaining);
  reply.header('ratelimit-reset', resetSeconds);
  return resetSeconds;
}

/** The 429 in the channel's shape (JSON-RPC on the MCP paths), with the caller's quota. */
async function refuse(
  deps: RateLimitPluginDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  path: string,
  caller: Caller,
  decision: RateDecision,
  resetSeconds: number,
): Promise<void> {
  const channel = isMcpPath(path) ? 'mcp' : 'http';
  deps.onRefused?.(callerTier(caller), channel);
  const service = await undebitedService(deps.quota, caller);
  // Status, JSON-RPC code, retryable and words from the error catalog, as every refusal.
  const { status, rpc, retryable } = ERRORS.RATE_LIMITED;
  const data = {
    code: 'RATE_LIMITED' as const,
    retryable,
    retry_after_ms: decision.resetMs,
    _service: service,
  };
  const message = errorMessage(data.code, { limit: decision.limit, seconds: resetSeconds });
  reply.code(status).header('retry-after', resetSeconds);
  if (channel === 'mcp') {
    const id = (request.body as { id?: unknown } | null)?.id;
    reply.send({
      jsonrpc: '2.0',
      id: typeof id === 'string' || typeof id === 'number' ? id : null,
      error: { code: rpc, message, data },
    });
    return;
  }
  reply.send({ code: data.code, message, retryable, retry_after_ms: data.retry_after_ms, _service: service });
}
