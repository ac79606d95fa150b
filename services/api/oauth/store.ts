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
}
