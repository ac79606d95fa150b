import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { type Cache, CacheUnavailableError, type DebitResult, type QuotaWindow } from './port.ts';
import {
  assertDebit,
  assertKey,
  assertRelease,
  assertSetWindows,
  assertTtl,
  assertWindowKeys,
  parseCounter,
} from './validate.ts';

const DEBIT_SCRIPT = readFileSync(new URL('./debit-windows.lua', import.meta.url), 'utf8');
/** Refund: lowers each existing counter by up to ARGV[1], keeping its expiry; a missing one stays missing. */
const RELEASE_SCRIPT = `
local reply = {}
for i, key in ipairs(KEYS) do
  local raw = redis.call('GET', key)
  if raw then
    local count = tonumber(raw)
    local give = math.min(count, tonumber(ARGV[1]))
    if give > 0 then count = redis.call('DECRBY', key, give) end
    reply[i] = count
  else
    reply[i] = 0
  end
end
return reply`;

export interface RedisCacheOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://` for TLS. */
  url: string;
  /** Prepended to every key: isolates tenants, deployments and test runs sharing one Redis. */
  prefix: string;
  logger?: Logger;
  /** Bound on establishing a connection (default 2000 ms). */
  connectTimeoutMs?: number;
  /** Bound on any single command once connected (default 2000 ms). */
  commandTimeoutMs?: number;
  /** Bound on the PING behind health() (default 1000 ms). */
  healthTimeoutMs?: number;
}

type ScriptedRedis = Redis & {
  signalDebitWindows(numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  signalReleaseWindows(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
};

/**
 * The Redis adapter: the distributed engine of the cache port, shared by every replica.
 *
 * It fails fast instead of queueing: commands issued while Redis is unreachable reject at once
 * with CacheUnavailableError (no offline queue), commands in flight when the connection drops
 * reject instead of being resent (a resent debit could count twice), and every command is
 * bounded by a timeout. The client keeps reconnecting in the background.
 */
export class RedisCache implements Cache {
  readonly kind = 'redis' as const;
  private readonly client: ScriptedRedis;
  private readonly where: string;
  private readonly prefix: string;
  private readonly healthTimeoutMs: number;
  private readonly logger: Logger | undefined;
  private lastError: string | null = null;

  /**
   * The connection and key prefix, for a library that keeps its own keys beside ours (the
   * request-rate limiter); it inherits the fail-fast settings (no offline queue).
   */
  get shared(): { redis: Redis; prefix: string } {
    return { redis: this.client, prefix: this.prefix };
  }

  constructor(options: RedisCacheOptions) {
    this.where = describeUrl(options.url);
    if (options.prefix.length === 0) throw new RangeError('redis cache prefix must not be empty');
    this.prefix = options.prefix;
    this.healthTimeoutMs = options.healthTimeoutMs ?? 1_000;
    this.logger = options.logger?.child({ component: 'cache', redis: this.where });
    this.client = new Redis(options.url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      connectTimeout: options.connectTimeoutMs ?? 2_000,
      commandTimeout: options.commandTimeoutMs ?? 2_000,
      retryStrategy: (attempt) => Math.min(100 * 2 ** Math.min(attempt, 5), 3_000),
      connectionName: 'signal-service',
    }) as ScriptedRedis;
    this.client.defineCommand('signalDebitWindows', { lua: DEBIT_SCRIPT });
    this.client.defineCommand('signalReleaseWindows', { lua: RELEASE_SCRIPT });
    this.client.on('error', (error: Error) => {
      // ioredis repeats the same error on every reconnect attempt; log each distinct one once.
      if (error.message !== this.lastError) this.logger?.warn({ err: error }, 'redis cache connection error');
      this.lastError = error.message;
    });
    this.client.on('ready', () => {
      if (this.lastError !== null) this.logger?.info('redis cache connection restored');
      this.lastError = null;
    });
  }

  /** First connection attempt; a failure leaves the adapter reporting unhealthy and retrying. */
  async connect(): Promise<void> {
    try {
      await this.client.connect();
    } catch (error) {
      // The 'error' event carries the cause (ECONNREFUSED, ENOTFOUND...); the rejection only says
      // the connection closed.
      this.lastError ??= errorMessage(error);
      this.logger?.error({ err: error }, 'redis cache unreachable at start; retrying in the background');
    }
  }

  async get(key: string): Promise<string | null> {
    assertKey(key);
    return this.run('get', () => this.client.get(this.k(key)));
  }

  async set(key: string, value: string, options: { ttlMs?: number } = {}): Promise<void> {
    assertKey(key);
    assertTtl(options.ttlMs);
    const { ttlMs } = options;
    await this.run('set', () =>
      ttlMs === undefined
        ? this.client.set(this.k(key), value)
        : this.client.set(this.k(key), value, 'PX', ttlMs),
    );
  }

  async setIfAbsent(key: string, value: string, options: { ttlMs?: number } = {}): Promise<boolean> {
    assertKey(key);
    assertTtl(options.ttlMs);
    const { ttlMs } = options;
    const reply = await this.run('setIfAbsent', () =>
      ttlMs === undefined
        ? this.client.set(this.k(key), value, 'NX')
        : this.client.set(this.k(key), value, 'PX', ttlMs, 'NX'),
    );
    return reply === 'OK';
  }

  async delete(key: string): Promise<void> {
    assertKey(key);
    await this.run('delete', () => this.client.del(this.k(key)));
  }

  async debitWindows(windows: QuotaWindow[], amount: number): Promise<DebitResult> {
    assertDebit(windows, amount);
    if (windows.length === 0) return { ok: true, counts: [], refusedBy: null };
    const args: (string | number)[] = windows.map((w) => this.k(w.key));
    args.push(amount);
    for (const window of windows) args.push(window.limit, window.expiresAt);
    const reply = await this.run('debitWindows', () =>
      this.client.signalDebitWindows(windows.length, ...args),
    );
    return decodeDebitReply(windows, reply);
  }

  async releaseWindows(keys: string[], amount: number): Promise<number[]> {
    assertRelease(keys, amount);
    if (keys.length === 0) return [];
    const reply = await this.run('releaseWindows', () =>
      this.client.signalReleaseWindows(keys.length, ...keys.map((key) => this.k(key)), amount),
    );
    return reply.map(Number);
  }

  async readWindows(keys: string[]): Promise<number[]> {
    assertWindowKeys(keys);
    if (keys.length === 0) return [];
    const raws = await this.run('readWindows', () => this.client.mget(...keys.map((key) => this.k(key))));
    return keys.map((key, i) => parseCounter(key, raws[i] ?? null));
  }

  async setWindows(windows: { key: string; count: number; expiresAt: number }[]): Promise<void> {
    assertSetWindows(windows);
    if (windows.length === 0) return;
    const results = await this.run('setWindows', () => {
      const transaction = this.client.multi();
      for (const w of windows) transaction.set(this.k(w.key), String(w.count), 'PXAT', w.expiresAt);
      return transaction.exec();
    });
    if (results === null)
      throw new CacheUnavailableError(`redis cache at ${this.where}: setWindows was aborted`);
    const failed = results.find(([error]) => error !== null);
    if (failed) throw failed[0]!;
  }

  async health(): Promise<{ ok: boolean; detail?: string }> {
    if (this.client.status !== 'ready') return { ok: false, detail: this.unavailableDetail() };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no PING reply within ${this.healthTimeoutMs} ms`)),
        this.healthTimeoutMs,
      );
    });
    try {
      const reply = await Promise.race([this.client.ping(), timeout]);
      return reply === 'PONG'
        ? { ok: true }
        : { ok: false, detail: `unexpected PING reply ${String(reply)}` };
    } catch (error) {
      return { ok: false, detail: `redis at ${this.where}: ${errorMessage(error)}` };
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    if (this.client.status === 'end') return;
    if (this.client.status === 'ready') {
      try {
        await this.client.quit();
        return;
      } catch {
        // The connection broke while quitting; drop it below.
      }
    }
    this.client.disconnect();
  }

  private k(key: string): string {
    return this.prefix + key;
  }

  private unavailableDetail(): string {
    const last = this.lastError === null ? '' : `, last error: ${this.lastError}`;
    return `redis at ${this.where} is not connected (status ${this.client.status}${last})`;
  }

  private async run<T>(operation: string, command: () => Promise<T>): Promise<T> {
    if (this.client.status !== 'ready') {
      throw new CacheUnavailableError(`redis cache ${operation} failed: ${this.unavailableDetail()}`);
    }
    try {
      return await command();
    } catch (error) {
      // A ReplyError is Redis refusing the command itself: a bug to surface, not an outage.
      if (error instanceof Error && error.name === 'ReplyError') throw error;
      throw new CacheUnavailableError(
        `redis cache ${operation} failed at ${this.where}: ${errorMessage(error)}`,
        {
          cause: error,
        },
      );
    }
  }
}

function decodeDebitReply(windows: QuotaWindow[], reply: unknown): DebitResult {
  if (!Array.isArray(reply) || reply.length < 2) {
    throw new TypeError(`unexpected debit script reply ${JSON.stringify(reply)}`);
  }
  const [status, index, ...rest] = reply as [number, number, ...unknown[]];
  if (status === 2) {
    const key = windows[index]!.key;
    parseCounter(key, String(rest[0]));
    throw new TypeError(`cache key ${key} is not a quota counter`);
  }
  const counts = rest.map(Number);
  return status === 1 ? { ok: true, counts, refusedBy: null } : { ok: false, counts, refusedBy: index };
}

function describeUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new RangeError('REDIS_URL is not a URL (expected redis://host:port)');
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new RangeError(`REDIS_URL must start with redis:// or rediss:// (got ${parsed.protocol}//)`);
  }
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Opens the Redis cache. Waits for the first connection attempt (bounded by the connect timeout)
 * so the first commands find a ready connection, but does not throw when Redis is down: the
 * adapter then reports unhealthy, rejects commands at once and keeps reconnecting.
 */
export async function connectRedisCache(options: RedisCacheOptions): Promise<RedisCache> {
  const cache = new RedisCache(options);
  await cache.connect();
  return cache;
}
