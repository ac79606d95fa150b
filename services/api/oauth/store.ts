import type { Redis } from 'ioredis';

/**
 * Where the OAuth server keeps its state (registered clients, grants, sessions, codes, tokens,
 * its signing keys): a few key-value operations with expiry and one index (the members of a
 * grant, so that revoking a grant ends its tokens). Two engines, like the cache port: in-process
 * for the embedded default, Redis for several api hosts (a code issued by one host is redeemed
 * on another, a grant revoked on one ends its tokens on all).
 */
export interface OAuthStore {
  /** The value and when it was consumed (an authorization code or refresh token used once). */
  get(key: string): Promise<{ value: string; consumedAt: number | null } | undefined>;
  /** Writes the value; `ttlS` undefined keeps it until deleted. Clears a consumed mark. */
  put(key: string, value: string, ttlS: number | undefined): Promise<void>;
  /**
   * Marks a live value consumed (it stays readable, so a reuse is seen), the first time only:
   * true when this call marked it, false when it is absent or was marked already (by another
   * request, on any host sharing the store).
   */
  consume(key: string, at: number): Promise<boolean>;
  del(keys: string[]): Promise<void>;
  /** Adds to a set that lives at least as long as its longest-lived member. */
  addMember(set: string, member: string, ttlS: number | undefined): Promise<void>;
  removeMember(set: string, member: string): Promise<void>;
  members(set: string): Promise<string[]>;
  /** Writes the value unless the key holds one; gives back the value that stays (ours or the first one). */
  putIfAbsent(key: string, value: string): Promise<string>;
  /**
   * Lengthens a live key's lifetime to at least `ttlS` from now: never shortens it, and leaves a
   * key kept until deleted (or absent) as it is.
   */
  extend(key: string, ttlS: number): Promise<void>;
  /**
   * Adds `member` to a list ordered by admission (the store's clock), whose members leave it after
   * `maxAgeS` and of which at most `max` stay: the oldest past `max` are pushed out, bar those
   * admitted to `opts.spare` within its `maxAgeS` (they keep their place), and bar `member` itself
   * (so the list may exceed `max` by at most the spare list's size). With `opts.record`, a
   * pushed-out member's record (`record` + member) is deleted in the same step, unless its
   * lifetime was lengthened past `maxAgeS` meanwhile (it was used) or it has none. Gives back the pushed-out
   * members (with `record`: those whose record was deleted); those that aged out had their own
   * lifetime.
   */
  admit(list: string, member: string, max: number, maxAgeS: number, opts?: AdmitOptions): Promise<string[]>;
  /** Takes `member` out of the list (it will not be pushed out). */
  dismiss(list: string, member: string): Promise<void>;
}

export interface AdmitOptions {
  /** Key prefix of the record each member stands for: deleted with a member pushed out. */
  record?: string;
  /** Another admission list: its members admitted within its `maxAgeS` are not pushed out. */
  spare?: { list: string; maxAgeS: number };
}

interface Entry {
  value: string;
  consumedAt: number | null;
  /** Epoch ms; Infinity when it does not expire. */
  expiresAt: number;
}

const expiry = (ttlS: number | undefined, now: number): number =>
  ttlS === undefined ? Number.POSITIVE_INFINITY : now + ttlS * 1_000;

/** The embedded engine: one process, gone at restart (signed-in hosts then sign in again). */
export class MemoryOAuthStore implements OAuthStore {
  private readonly values = new Map<string, Entry>();
  private readonly sets = new Map<string, { members: Set<string>; expiresAt: number }>();
  /** Ordered lists: member → when it was admitted (epoch ms), in admission order. */
  private readonly lists = new Map<string, Map<string, number>>();
  private writes = 0;

  constructor(private readonly now: () => number = Date.now) {}

  private live<T extends { expiresAt: number }>(map: Map<string, T>, key: string): T | undefined {
    const entry = map.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= this.now()) {
      map.delete(key);
      return undefined;
    }
    return entry;
  }

  /** Expired entries nobody reads again are dropped now and then, not on a timer. */
  private sweep(): void {
    if (++this.writes % 1_000 !== 0) return;
    const now = this.now();
    for (const [key, entry] of this.values) if (entry.expiresAt <= now) this.values.delete(key);
    for (const [key, entry] of this.sets) if (entry.expiresAt <= now) this.sets.delete(key);
  }

  async get(key: string) {
    const entry = this.live(this.values, key);
    return entry && { value: entry.value, consumedAt: entry.consumedAt };
  }

  async put(key: string, value: string, ttlS: number | undefined) {
    this.sweep();
    this.values.set(key, { value, consumedAt: null, expiresAt: expiry(ttlS, this.now()) });
  }

  async consume(key: string, at: number) {
    const entry = this.live(this.values, key);
    if (entry === undefined || entry.consumedAt !== null) return false;
    entry.consumedAt = at;
    return true;
  }

  async del(keys: string[]) {
    for (const key of keys) {
      this.values.delete(key);
      this.sets.delete(key);
    }
  }

  async addMember(set: string, member: string, ttlS: number | undefined) {
    this.sweep();
    const expiresAt = expiry(ttlS, this.now());
    const entry = this.live(this.sets, set);
    if (entry === undefined) {
      this.sets.set(set, { members: new Set([member]), expiresAt });
      return;
    }
    entry.members.add(member);
    entry.expiresAt = Math.max(entry.expiresAt, expiresAt);
  }

  async removeMember(set: string, member: string) {
    this.live(this.sets, set)?.members.delete(member);
  }

  async members(set: string) {
    return [...(this.live(this.sets, set)?.members ?? [])];
  }

  async putIfAbsent(key: string, value: string) {
    const entry = this.live(this.values, key);
    if (entry) return entry.value;
    this.values.set(key, { value, consumedAt: null, expiresAt: Number.POSITIVE_INFINITY });
    return value;
  }

  async extend(key: string, ttlS: number) {
    const entry = this.live(this.values, key);
    if (entry) entry.expiresAt = Math.max(entry.expiresAt, expiry(ttlS, this.now()));
  }

  async admit(list: string, member: string, max: number, maxAgeS: number, opts: AdmitOptions = {}) {
    let members = this.lists.get(list);
    if (members === undefined) {
      members = new Map();
      this.lists.set(list, members);
    }
    const now = this.now();
    // In admission order: the aged ones are at the front.
    for (const [m, at] of members) {
      if (at + maxAgeS * 1_000 > now) break;
      members.delete(m);
    }
    members.delete(member);
    members.set(member, now);
    const spare = opts.spare && this.lists.get(opts.spare.list);
    const spared = (m: string) => {
      const at = spare?.get(m);
      return at !== undefined && opts.spare !== undefined && at + opts.spare.maxAgeS * 1_000 > now;
    };
    const over = members.size - max;
    const out: string[] = [];
    for (const m of members.keys()) {
      if (out.length >= over) break;
      // Never the one being admitted: its caller goes on to use it (the library answers 201 with it).
      if (m !== member && !spared(m)) out.push(m);
    }
    for (const m of out) members.delete(m);
    if (opts.record === undefined) return out;
    const deleted: string[] = [];
    for (const m of out) {
      const entry = this.live(this.values, opts.record + m);
      // Lengthened past the list's age: saved for a grant or token since it was admitted.
      if (entry && entry.expiresAt - now > maxAgeS * 1_000) continue;
      this.values.delete(opts.record + m);
      deleted.push(m);
    }
    return deleted;
  }

  async dismiss(list: string, member: string) {
    this.lists.get(list)?.delete(member);
  }
}

const CONSUMED = ':consumed';

/**
 * The shared engine, on the cache's Redis connection under its own key prefix. A consumed mark
 * is a sibling key with the same remaining lifetime, so marking never rewrites the value.
 */
export class RedisOAuthStore implements OAuthStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k(key: string): string {
    return this.prefix + key;
  }

  async get(key: string) {
    const [value, consumed] = await this.redis.mget(this.k(key), this.k(key) + CONSUMED);
    if (value === null || value === undefined) return undefined;
    return { value, consumedAt: consumed ? Number(consumed) : null };
  }

  async put(key: string, value: string, ttlS: number | undefined) {
    const multi = this.redis.multi();
    if (ttlS === undefined) multi.set(this.k(key), value);
    else multi.set(this.k(key), value, 'EX', ttlS);
    multi.del(this.k(key) + CONSUMED);
    await multi.exec();
  }

  async consume(key: string, at: number) {
    // One script: of several requests consuming at once (on any host), one only sets the mark
    // (NX), and never on a record deleted meanwhile. Read and marked in two steps, a grant revoked
    // between them (a raced code's, adapter.ts) lost its code and its mark, and the mark then set
    // served that code a second time.
    const marked = await this.redis.eval(CONSUME, 2, this.k(key), this.k(key) + CONSUMED, String(at));
    return marked === 1;
  }

  async del(keys: string[]) {
    if (keys.length === 0) return;
    await this.redis.del(...keys.flatMap((key) => [this.k(key), this.k(key) + CONSUMED]));
  }

  async addMember(set: string, member: string, ttlS: number | undefined) {
    const multi = this.redis.multi().sadd(this.k(set), member);
    if (ttlS === undefined) multi.persist(this.k(set));
    // NX sets the first lifetime, GT only ever lengthens it: the set outlives every member.
    else multi.expire(this.k(set), ttlS, 'NX').expire(this.k(set), ttlS, 'GT');
    await multi.exec();
  }

  async removeMember(set: string, member: string) {
    await this.redis.srem(this.k(set), member);
  }

  async members(set: string) {
    return this.redis.smembers(this.k(set));
  }

  async putIfAbsent(key: string, value: string) {
    await this.redis.set(this.k(key), value, 'NX');
    return (await this.redis.get(this.k(key))) ?? value;
  }

  async extend(key: string, ttlS: number) {
    // GT: only a longer lifetime is set; a key without one (or absent) is left as it is.
    await this.redis.expire(this.k(key), ttlS, 'GT');
  }

  async admit(list: string, member: string, max: number, maxAgeS: number, opts: AdmitOptions = {}) {
    // One script, so that hosts admitting at once push out each member once, and a record is
    // checked and deleted in one step (another host may be saving a grant for it). Scored on
    // Redis's clock: with the hosts' own, one ahead would age members off early.
    const spare = opts.spare;
    const out = (await this.redis.eval(
      ADMIT,
      2,
      this.k(list),
      spare ? this.k(spare.list) : this.k(list),
      String(maxAgeS * 1_000),
      member,
      String(max),
      String(spare ? spare.maxAgeS * 1_000 : 0),
      opts.record === undefined ? '' : this.k(opts.record),
    )) as string[];
    return out;
  }

  async dismiss(list: string, member: string) {
    await this.redis.zrem(this.k(list), member);
  }
}

/**
 * Marks KEYS[1] consumed (KEYS[2] = ARGV[1], with the record's remaining lifetime) if it exists
 * and has no mark: 1 when this call set the mark, else 0.
 */
const CONSUME = `
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
local set
if ttl == -1 then
  set = redis.call('SET', KEYS[2], ARGV[1], 'NX')
else
  set = redis.call('SET', KEYS[2], ARGV[1], 'PX', math.max(ttl, 1), 'NX')
end
if set then return 1 end
return 0
`;

/**
 * A sorted set scored by admission time (ms, Redis's TIME): drops the members older than the age,
 * adds the member, takes out the oldest past the count (bar the member itself, and those in the
 * spare set, KEYS[2], admitted within its age ARGV[4]; none when 0), deletes their records
 * (prefix ARGV[5], when given) unless one's lifetime exceeds the age or it has none, and returns those taken out
 * (with a prefix: those deleted); the set lives as long as its newest.
 */
const ADMIT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local age = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - age)
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], age)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
local out = {}
if over <= 0 then return out end
local spareAge = tonumber(ARGV[4])
local i = 0
while #out < over do
  local batch = redis.call('ZRANGE', KEYS[1], i, i + 99)
  if #batch == 0 then break end
  for _, m in ipairs(batch) do
    local spared = m == ARGV[2]
    if not spared and spareAge > 0 then
      local at = redis.call('ZSCORE', KEYS[2], m)
      spared = at and tonumber(at) > now - spareAge
    end
    if not spared then
      out[#out + 1] = m
      if #out >= over then break end
    end
  end
  i = i + 100
end
for _, m in ipairs(out) do redis.call('ZREM', KEYS[1], m) end
if ARGV[5] == '' then return out end
local deleted = {}
for _, m in ipairs(out) do
  local key = ARGV[5] .. m
  -- -1 (no lifetime) is kept, as the in-process store keeps one that never expires; -2 is gone.
  local ttl = redis.call('PTTL', key)
  if ttl == -2 or (ttl >= 0 and ttl <= age) then
    redis.call('DEL', key, key .. '${CONSUMED}')
    deleted[#deleted + 1] = m
  end
end
return deleted
`;
