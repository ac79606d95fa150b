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
  /** Marks a live value consumed (it stays readable, so a reuse is seen). */
  consume(key: string, at: number): Promise<void>;
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
   * Adds `member` to a list ordered by admission, whose members leave it after `maxAgeS` and of
   * which at most `max` stay: gives back the oldest ones pushed out past `max` (the caller deletes
   * what they stand for; those that aged out had their own lifetime).
   */
  admit(list: string, member: string, max: number, maxAgeS: number): Promise<string[]>;
  /** Takes `member` out of the list (it will not be pushed out). */
  dismiss(list: string, member: string): Promise<void>;
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
    if (entry) entry.consumedAt = at;
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

  async admit(list: string, member: string, max: number, maxAgeS: number) {
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
    const out: string[] = [];
    for (const m of members.keys()) {
      if (members.size <= max) break;
      members.delete(m);
      out.push(m);
    }
    return out;
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
    const ttlMs = await this.redis.pttl(this.k(key));
    if (ttlMs === -2) return;
    if (ttlMs === -1) await this.redis.set(this.k(key) + CONSUMED, String(at));
    else await this.redis.set(this.k(key) + CONSUMED, String(at), 'PX', Math.max(ttlMs, 1));
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

  async admit(list: string, member: string, max: number, maxAgeS: number) {
    // One script, so that hosts admitting at once push out each member once.
    const out = (await this.redis.eval(
      ADMIT,
      1,
      this.k(list),
      String(Date.now()),
      String(maxAgeS * 1_000),
      member,
      String(max),
    )) as string[];
    return out;
  }

  async dismiss(list: string, member: string) {
    await this.redis.zrem(this.k(list), member);
  }
}

/**
 * A sorted set scored by admission time (ms): drops the members older than the age, adds the
 * member, pops the oldest past the count and returns them; the set lives as long as its newest.
 */
const ADMIT = `
local now = tonumber(ARGV[1])
local age = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - age)
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], age)
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
local out = {}
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #popped, 2 do out[#out + 1] = popped[i] end
end
return out
`;
