import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { maskUrlCredentials } from '../../contracts/mask-url.ts';
import { beforeAbort } from '../before-abort.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import {
  CACHE_LOG_COMPONENT,
  type Cache,
  CacheUnavailableError,
  type CounterGeneration,
  CounterStateLostError,
  type DebitResult,
  type QuotaWindow,
  REFUND_ID_TTL_MS,
} from './port.ts';
import { refusedByRedis } from './redis-replies.ts';
import { TurnBatch } from './turn-batch.ts';
import {
  assertAddWindows,
  assertDebit,
  assertGeneration,
  assertKey,
  assertMarker,
  assertRelease,
  assertSetWindows,
  assertTtl,
  assertWindowKeys,
  BUILDING_TTL_MS,
  debitOutcomeKey,
  GENERATION_PREFIX,
  generationBuildingKey,
  generationDebitsKey,
  generationKey,
  markerKey,
  parseCounter,
  parseMarker,
  refundIdKey,
} from './validate.ts';

const DEBIT_CORE = readFileSync(new URL('./debit-windows.lua', import.meta.url), 'utf8');
/**
 * The live generation, from its marker (KEYS[1]). A debit reads it and debits that generation's
 * counters in the same script, so a debit can neither land on a generation being replaced nor on
 * counters that a data loss emptied. The counter keys are built inside the script from the
 * marker, which a single Redis allows (a cluster would need them all on the marker's slot).
 */
const LIVE_MARKER_LUA = `
local function live_generation()
  local raw = redis.call('GET', KEYS[1])
  if not raw then return nil end
  local ok, marker = pcall(cjson.decode, raw)
  if not ok or type(marker) ~= 'table' or type(marker.id) ~= 'string' then return nil end
  return marker.id
end
`;
/**
 * give_back(key, amount): lowers the counter in `key` by up to `amount`, never below 0, keeping its
 * expiry; a missing counter stays missing (0). Returns the count after.
 */
const GIVE_BACK_LUA = `
local function give_back(key, amount)
  local raw = redis.call('GET', key)
  if not raw then return 0 end
  local count = tonumber(raw)
  local give = math.min(count, amount)
  if give > 0 then count = redis.call('DECRBY', key, give) end
  return count
end
`;
/**
 * The debits of one turn in one script, in the order asked. ARGV[1] the keys' prefix, ARGV[2] the
 * number of debits, ARGV[3] the call's outcome key, ARGV[4] its time to live in ms, ARGV[5] the
 * number of earlier calls' outcome keys to forget (their answers came), those keys, then per debit
 * its n, n keys, amount and n (limit, expiresAt). With KEYS[1], a family's marker: on its live
 * generation's counters (each made debit counted in its `#debits`), the reply led by the generation
 * ({} when none is live); without, on the keys as named, led by ''. The outcome key keeps what was
 * debited (`generation|` and a 1 or 0 a debit) for a call whose answer is lost (GIVE_BACK_SCRIPT);
 * a call that finds it there already was given back before it ran (its answer long given up on),
 * and debits nothing.
 */
const DEBIT_MANY_SCRIPT = `${DEBIT_CORE}${LIVE_MARKER_LUA}
if redis.call('EXISTS', ARGV[3]) == 1 then return {} end
local forget = tonumber(ARGV[5])
if forget > 0 then redis.call('UNLINK', unpack(ARGV, 6, 5 + forget)) end
local base = ARGV[1]
local replies = {''}
if #KEYS == 1 then
  local generation = live_generation()
  if not generation then return {} end
  base = base .. generation .. ':'
  replies[1] = generation
end
local made = {}
local at = 6 + forget
for d = 1, tonumber(ARGV[2]) do
  local n = tonumber(ARGV[at])
  local keys = {}
  for i = 1, n do keys[i] = base .. ARGV[at + i] end
  local reply = debit_windows(keys, ARGV, at + n)
  local amount = tonumber(ARGV[at + n + 1])
  if #KEYS == 1 and reply[1] == 1 and amount > 0 then redis.call('INCRBY', base .. '#debits', amount) end
  made[d] = (reply[1] == 1 and amount > 0) and '1' or '0'
  replies[d + 1] = reply
  at = at + 3 * n + 2
end
redis.call('SET', ARGV[3], replies[1] .. '|' .. table.concat(made), 'PX', ARGV[4])
return replies`;
/**
 * Gives back what one debit script call made, when its answer was lost (a timeout, a dropped
 * connection): KEYS[1] its outcome key; ARGV[1] the keys' prefix (a family's generation prefix, or
 * the plain one), ARGV[2] the key's time to live in ms, ARGV[3] the number of debits, then per
 * debit its n, n keys, amount and n expiresAt, as the call sent them. Lowers each counter the call
 * debited (and its generation's `#debits`) by up to the amount, and leaves the key marked given
 * back, so a second try gives nothing and a call that runs only now (still in the server's buffer)
 * debits nothing. A window whose expiresAt has passed (by Redis's clock, which expires it) is left
 * alone: its counter is gone with it, and one under its key is a later window's, debited by other
 * calls (a rate window's key names no period). Reply: the units given back a window.
 */
const GIVE_BACK_SCRIPT = `${GIVE_BACK_LUA}
local raw = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '-', 'PX', ARGV[2])
if not raw or raw == '-' then return 0 end
local bar = string.find(raw, '|', 1, true)
local generation = string.sub(raw, 1, bar - 1)
local made = string.sub(raw, bar + 1)
local base = ARGV[1]
if generation ~= '' then base = base .. generation .. ':' end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local given = 0
local at = 4
for d = 1, tonumber(ARGV[3]) do
  local n = tonumber(ARGV[at])
  local amount = tonumber(ARGV[at + n + 1])
  if string.sub(made, d, d) == '1' then
    for i = 1, n do
      if tonumber(ARGV[at + n + 1 + i]) > now then give_back(base .. ARGV[at + i], amount) end
    end
    if generation ~= '' then give_back(base .. '#debits', amount) end
    given = given + amount
  end
  at = at + 2 * n + 2
end
return given`;
/** Debits sent in one script call at most; a larger turn's go out in several. */
export const MAX_DEBITS_PER_SCRIPT = 256;
/**
 * How long a debit call's outcome key lives: a call whose answer was lost is given back if Redis
 * answers again within it (a longer outage leaves it counted). Answered calls' keys are deleted by
 * the next call, so the keys held are those of the calls in flight and the last few.
 */
export const DEBIT_OUTCOME_TTL_MS = 3_600_000;
/** Answered calls' outcome keys one debit call deletes at most. */
const MAX_FORGOTTEN_PER_SCRIPT = 256;

/** A debit script call whose answer was lost: what it sent, to give back once Redis answers again. */
interface LostDebits {
  outcomeKey: string;
  family: string | null;
  debits: { keys: string[]; amount: number; expiresAt: number[] }[];
  /** After this (Unix ms) its outcome key is gone: what it made stays counted. */
  until: number;
}

interface PendingDebit {
  windows: QuotaWindow[];
  amount: number;
  resolve: (result: DebitResult & { generation?: string }) => void;
  reject: (err: unknown) => void;
}

/**
 * KEYS[1] marker; ARGV: generation key prefix, generation, amount, window keys. Gives back up to
 * the amount on each existing counter and on the debit count, only while the generation is live.
 */
const RELEASE_LIVE_SCRIPT = `${LIVE_MARKER_LUA}${GIVE_BACK_LUA}
if live_generation() ~= ARGV[2] then return 0 end
local base = ARGV[1] .. ARGV[2] .. ':'
local keys = {base .. '#debits'}
for i = 4, #ARGV do keys[#keys + 1] = base .. ARGV[i] end
for _, key in ipairs(keys) do give_back(key, tonumber(ARGV[3])) end
return 1`;
/** KEYS[1] marker; ARGV: generation key prefix, window keys. Reply: {} when lost, else {generation, raw...}. */
const READ_LIVE_SCRIPT = `${LIVE_MARKER_LUA}
local generation = live_generation()
if not generation then return {} end
local reply = {generation}
for i = 2, #ARGV do
  reply[i] = redis.call('GET', ARGV[1] .. generation .. ':' .. ARGV[i]) or false
end
return reply`;
/**
 * KEYS[1] marker, KEYS[2] the refund's id key ('' for none); ARGV: generation key prefix, amount,
 * the id's time to live in ms, window keys. Gives back up to the amount on each existing counter
 * of the live generation and adds it to that generation's count of logged operations, once per
 * id. Reply: the generation it was given back on (the first try's, for an id seen before), or
 * false when none is live.
 */
const REFUND_LIVE_SCRIPT = `${LIVE_MARKER_LUA}${GIVE_BACK_LUA}
local generation = live_generation()
if not generation then return false end
if KEYS[2] ~= '' then
  local first = redis.call('GET', KEYS[2])
  if first then return first end
  redis.call('SET', KEYS[2], generation, 'PX', ARGV[3])
end
local base = ARGV[1] .. generation .. ':'
local amount = tonumber(ARGV[2])
for i = 4, #ARGV do give_back(base .. ARGV[i], amount) end
if amount > 0 then redis.call('INCRBY', base .. '#debits', amount) end
return generation`;
/**
 * Compare-and-set of the marker: KEYS[1] the marker, KEYS[2] the new generation's build sentinel;
 * ARGV[1] the expected id ('' for none), ARGV[2] the new marker. A sentinel gone means the server
 * lost data since the build began: what the generation holds is partial, so it must not go live.
 */
const SWITCH_SCRIPT = `${LIVE_MARKER_LUA}
if (live_generation() or '') ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[2]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`;
/**
 * INCRBY each KEYS[i] by ARGV[2i - 1], setting the expiry ARGV[2i] when the counter is created; a
 * negative amount gives back what there is, never below 0 and never creating a counter.
 */
const ADD_SCRIPT = `${GIVE_BACK_LUA}
for i, key in ipairs(KEYS) do
  local amount = tonumber(ARGV[2 * i - 1])
  if amount >= 0 then
    if redis.call('INCRBY', key, amount) == amount then redis.call('PEXPIREAT', key, ARGV[2 * i]) end
  else
    give_back(key, -amount)
  end
end
return #KEYS`;
/** Refund: lowers each existing counter by up to ARGV[1], keeping its expiry; a missing one stays missing. */
const RELEASE_SCRIPT = `${GIVE_BACK_LUA}
local reply = {}
for i, key in ipairs(KEYS) do reply[i] = give_back(key, tonumber(ARGV[1])) end
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
  /**
   * Ends the first connection attempt when it aborts (the process asked to stop while starting):
   * the client is disconnected, tries no more, and the signal's reason is thrown.
   */
  signal?: AbortSignal;
}

type ScriptedRedis = Redis & {
  signalReleaseWindows(numKeys: number, ...args: (string | number)[]): Promise<number[]>;
  signalDebitMany(numKeys: number, ...args: (string | number)[]): Promise<unknown[]>;
  signalReleaseLive(numKeys: number, ...args: (string | number)[]): Promise<number>;
  signalReadLive(numKeys: number, ...args: (string | number)[]): Promise<(string | null)[]>;
  signalRefundLive(numKeys: number, ...args: (string | number)[]): Promise<string | null>;
  signalSwitchGeneration(numKeys: number, ...args: (string | number)[]): Promise<number>;
  signalGiveBackDebits(numKeys: number, ...args: (string | number)[]): Promise<number>;
  signalAddToGeneration(numKeys: number, ...args: (string | number)[]): Promise<number>;
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
  /** Why the last connection was dropped when the server refused REDIS_URL's database, else null. */
  private databaseRefused: string | null = null;
  /** Set from that drop until its connection has closed. */
  private dropping = false;
  /** Whether connect() has returned: a refusal before is thrown by it, one after is logged. */
  private connected = false;
  private readonly reconnectListeners: (() => void)[] = [];

  /**
   * The connection and key prefix, for a store that keeps its own keys beside ours (the OAuth
   * store); it inherits the fail-fast settings (no offline queue).
   */
  get shared(): { redis: Redis; prefix: string } {
    return { redis: this.client, prefix: this.prefix };
  }

  constructor(options: RedisCacheOptions) {
    this.where = describeUrl(options.url);
    if (options.prefix.length === 0) throw new RangeError('redis cache prefix must not be empty');
    this.prefix = options.prefix;
    this.healthTimeoutMs = options.healthTimeoutMs ?? 1_000;
    this.logger = options.logger?.child({ component: CACHE_LOG_COMPONENT, redis: this.where });
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
    this.client.defineCommand('signalReleaseWindows', { lua: RELEASE_SCRIPT });
    this.client.defineCommand('signalDebitMany', { lua: DEBIT_MANY_SCRIPT });
    this.client.defineCommand('signalReadLive', { lua: READ_LIVE_SCRIPT });
    this.client.defineCommand('signalReleaseLive', { lua: RELEASE_LIVE_SCRIPT });
    this.client.defineCommand('signalRefundLive', { lua: REFUND_LIVE_SCRIPT });
    this.client.defineCommand('signalSwitchGeneration', { lua: SWITCH_SCRIPT });
    this.client.defineCommand('signalGiveBackDebits', { lua: GIVE_BACK_SCRIPT });
    this.client.defineCommand('signalAddToGeneration', { lua: ADD_SCRIPT });
    this.client.on('error', (error: Error) => {
      const database = refusedDatabase(error);
      if (database !== null) {
        // ioredis carries on after a refused SELECT, on database 0, and reports the connection
        // ready: this connection is dropped before anything else is sent on it, and made again in
        // the background (a start stops at it, see connect()).
        this.databaseRefused = `the server refused database ${database} of REDIS_URL (${error.message}): set REDIS_URL to a database it has (0 up to its 'databases' setting less one) or no path for database 0`;
        // At start it is connect()'s error to tell.
        if (this.connected && this.databaseRefused !== this.lastError)
          this.logger?.error({ err: error }, `redis cache: ${this.databaseRefused}`);
        this.lastError = this.databaseRefused;
        this.dropping = true;
        this.client.disconnect(true);
        return;
      }
      // The rest of that connection's handshake failing on the closed stream says nothing new.
      if (this.dropping) return;
      // ioredis repeats the same error on every reconnect attempt; log each distinct one once.
      if (error.message !== this.lastError) this.logger?.warn({ err: error }, 'redis cache connection error');
      this.lastError = error.message;
    });
    this.client.on('close', () => {
      this.dropping = false;
    });
    this.client.on('ready', () => {
      if (this.lastError !== null) this.logger?.info('redis cache connection restored');
      this.lastError = null;
      this.databaseRefused = null;
      // Sent before anything else on the new connection: a retried call's debit comes after it.
      this.giveBackLost();
      // A server that restarted comes back empty (or from an older snapshot): let the owners of
      // counters check theirs. Listeners registered after connect() see every later connection.
      for (const listener of this.reconnectListeners) listener();
    });
  }

  /**
   * First connection attempt; a failure leaves the adapter reporting unhealthy and retrying. A
   * database the server refuses is a setting to correct, not an outage to wait out: it throws,
   * naming REDIS_URL, and stops retrying. An abort of `signal` ends the attempt (the client
   * disconnected, no retry) and throws the signal's reason.
   */
  async connect(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    // Disconnected on an abort: the attempt in flight ends at once, and no other is made. Its
    // socket is destroyed as well: disconnect() only half-closes it and waits up to 2 s for the
    // server's end, which a server that does not answer never sends.
    const abandon = () => {
      this.client.disconnect();
      this.client.stream?.destroy();
    };
    signal?.addEventListener('abort', abandon, { once: true });
    try {
      await beforeAbort(this.client.connect(), signal);
    } catch (error) {
      // What the attempt's end says (`Connection is closed.`) is the abort's doing, not an outage.
      if (signal?.aborted) throw signal.reason;
      if (this.databaseRefused !== null) {
        this.client.disconnect();
        throw new DependencyRefusedError(`redis at ${this.where}: ${this.databaseRefused}`);
      }
      // The 'error' event carries the cause (ECONNREFUSED, ENOTFOUND...); the rejection only says
      // the connection closed.
      this.lastError ??= errorMessage(error);
      this.logger?.error({ err: error }, 'redis cache unreachable at start; retrying in the background');
    } finally {
      signal?.removeEventListener('abort', abandon);
      this.connected = true;
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

  debitWindows(windows: QuotaWindow[], amount: number): Promise<DebitResult> {
    return this.debit(null, windows, amount);
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

  async liveGeneration(family: string): Promise<CounterGeneration | null> {
    const key = markerKey(family);
    return parseMarker(await this.run('liveGeneration', () => this.client.get(this.k(key))));
  }

  /**
   * The debits of one turn (after its I/O callbacks) go to Redis in one script call per family
   * (and one for plain windows), each still decided atomically and in the order asked: profiled on
   * the keyed MCP path, a script call per debit (its command, its write, its reply) was ~6 % of a
   * call, and more than the counting for the request-rate limiter (bench/rate-limit.bench.ts). A
   * debit waits at most for the end of the turn it was asked in.
   */
  private readonly debits = new Map<string | null, TurnBatch<PendingDebit>>();

  debitLive(
    family: string,
    windows: QuotaWindow[],
    amount: number,
  ): Promise<DebitResult & { generation: string }> {
    return this.debit(family, windows, amount) as Promise<DebitResult & { generation: string }>;
  }

  private debit(family: string | null, windows: QuotaWindow[], amount: number) {
    try {
      assertDebit(windows, amount);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.client.status !== 'ready') {
      const operation = family === null ? 'debitWindows' : 'debitLive';
      return Promise.reject(
        new CacheUnavailableError(`redis cache ${operation} failed: ${this.unavailableDetail()}`),
      );
    }
    let batch = this.debits.get(family);
    if (batch === undefined) {
      batch = new TurnBatch((debits) => this.sendDebits(family, debits), MAX_DEBITS_PER_SCRIPT);
      this.debits.set(family, batch);
    }
    const debits = batch;
    return new Promise<DebitResult & { generation?: string }>((resolve, reject) =>
      debits.add({ windows, amount, resolve, reject }),
    );
  }

  /** Distinguishes this process's debit calls' outcome keys from other replicas'. */
  private readonly debitTag = randomBytes(6).toString('hex');
  private debitCalls = 0;
  /** Outcome keys of debit calls answered since the last call went out: that call deletes them. */
  private answered: string[] = [];
  /** Debit calls whose answer was lost, to give back once Redis answers again. */
  private lost: LostDebits[] = [];

  /**
   * Sends a family's (or plain windows') debits of one turn in one script call and settles each.
   * A call whose answer is lost (a timeout, a dropped connection) may have been made in Redis all
   * the same, while each of its callers is told the cache is unavailable and may call again: so
   * the call leaves what it debited under an outcome key, and such a call is given back as soon
   * as Redis answers again (giveBackLost). A debit rejected as unavailable is not counted.
   */
  private sendDebits(family: string | null, batch: PendingDebit[]): void {
    const keys = family === null ? [] : [this.k(markerKey(family))];
    const outcomeKey = this.k(debitOutcomeKey(`${this.debitTag}-${(this.debitCalls++).toString(36)}`));
    const forget = this.answered.splice(0, MAX_FORGOTTEN_PER_SCRIPT);
    const args: (string | number)[] = [
      this.k(family === null ? '' : GENERATION_PREFIX),
      batch.length,
      outcomeKey,
      DEBIT_OUTCOME_TTL_MS,
      forget.length,
      ...forget,
    ];
    for (const { windows, amount } of batch) {
      args.push(windows.length);
      for (const window of windows) args.push(window.key);
      args.push(amount);
      for (const window of windows) args.push(window.limit, window.expiresAt);
    }
    const sentAt = Date.now();
    this.run(family === null ? 'debitWindows' : 'debitLive', () =>
      this.client.signalDebitMany(keys.length, ...keys, ...args),
    ).then(
      (reply) => {
        this.answered.push(outcomeKey);
        if (reply.length === 0) {
          for (const debit of batch) debit.reject(new CounterStateLostError(family!));
          return;
        }
        const generation = String(reply[0]);
        batch.forEach((debit, i) => {
          try {
            const result = decodeDebitReply(debit.windows, reply[i + 1]);
            debit.resolve(family === null ? result : { ...result, generation });
          } catch (err) {
            debit.reject(err);
          }
        });
      },
      (err: unknown) => {
        // Redis's own refusal is an answer: the script did not run to its end, nothing to give back.
        if (!answeredByRedis(err)) {
          const debits = batch.map(({ windows, amount }) => ({
            keys: windows.map((w) => w.key),
            amount,
            expiresAt: windows.map((w) => w.expiresAt),
          }));
          this.lost.push({ outcomeKey, family, debits, until: sentAt + DEBIT_OUTCOME_TTL_MS });
          // Given back on the next connection's 'ready'; at once if this one stays up.
          setTimeout(() => this.giveBackLost(), 0).unref();
        }
        for (const debit of batch) debit.reject(err);
      },
    );
  }

  /**
   * Gives back the debit calls whose answer was lost, once Redis answers: each by its outcome key,
   * what it made and nothing more, once however often it is tried (GIVE_BACK_SCRIPT). One that
   * fails is tried again on the next connection until its outcome key is gone.
   */
  private giveBackLost(): void {
    if (this.lost.length === 0 || this.client.status !== 'ready') return;
    const lost = this.lost;
    this.lost = [];
    for (const call of lost) {
      const args: (string | number)[] = [
        this.k(call.family === null ? '' : GENERATION_PREFIX),
        DEBIT_OUTCOME_TTL_MS,
        call.debits.length,
      ];
      for (const { keys, amount, expiresAt } of call.debits)
        args.push(keys.length, ...keys, amount, ...expiresAt);
      this.run('giveBackDebits', () => this.client.signalGiveBackDebits(1, call.outcomeKey, ...args)).then(
        (units) => {
          if (Number(units) > 0)
            this.logger?.info(
              { family: call.family, units: Number(units) },
              'redis cache debit whose answer was lost given back: its callers were told the cache was unavailable',
            );
        },
        (err: unknown) => {
          if (!answeredByRedis(err) && Date.now() < call.until) {
            this.lost.push(call);
            return;
          }
          this.logger?.error(
            { err, family: call.family, debits: call.debits.length },
            'redis cache debit whose answer was lost not given back: it may stay counted',
          );
        },
      );
    }
  }

  async releaseLive(family: string, generation: string, keys: string[], amount: number): Promise<boolean> {
    assertGeneration(generation);
    assertRelease(keys, amount);
    const released = await this.run('releaseLive', () =>
      this.client.signalReleaseLive(
        1,
        this.k(markerKey(family)),
        this.k(GENERATION_PREFIX),
        generation,
        amount,
        ...keys,
      ),
    );
    return released === 1;
  }

  async refundLive(family: string, keys: string[], amount: number, id?: string): Promise<string | null> {
    assertRelease(keys, amount);
    const once = id === undefined ? '' : this.k(refundIdKey(family, id));
    const generation = await this.run('refundLive', () =>
      this.client.signalRefundLive(
        2,
        this.k(markerKey(family)),
        once,
        this.k(GENERATION_PREFIX),
        amount,
        REFUND_ID_TTL_MS,
        ...keys,
      ),
    );
    return generation === null ? null : String(generation);
  }

  async beginGeneration(generation: string): Promise<void> {
    assertGeneration(generation);
    await this.run('beginGeneration', () =>
      this.client.set(this.k(generationBuildingKey(generation)), '1', 'PX', BUILDING_TTL_MS),
    );
  }

  async readLive(family: string, keys: string[]): Promise<number[]> {
    assertWindowKeys(keys);
    const reply = await this.run('readLive', () =>
      this.client.signalReadLive(1, this.k(markerKey(family)), this.k(GENERATION_PREFIX), ...keys),
    );
    if (reply.length === 0) throw new CounterStateLostError(family);
    return keys.map((key, i) => parseCounter(key, reply[i + 1] ?? null));
  }

  async addToGeneration(
    generation: string,
    windows: { key: string; count: number; expiresAt: number }[],
  ): Promise<void> {
    assertGeneration(generation);
    assertAddWindows(windows);
    if (windows.length === 0) return;
    const keys = windows.map((w) => this.k(generationKey(generation, w.key)));
    const args = windows.flatMap((w) => [w.count, w.expiresAt]);
    await this.run('addToGeneration', () => this.client.signalAddToGeneration(keys.length, ...keys, ...args));
  }

  async switchGeneration(family: string, expected: string | null, next: CounterGeneration): Promise<boolean> {
    assertMarker(next);
    const marker = JSON.stringify({ id: next.id, position: next.position });
    const switched = await this.run('switchGeneration', () =>
      this.client.signalSwitchGeneration(
        2,
        this.k(markerKey(family)),
        this.k(generationBuildingKey(next.id)),
        expected ?? '',
        marker,
      ),
    );
    return switched === 1;
  }

  async generationDebits(generation: string): Promise<number | null> {
    assertGeneration(generation);
    const key = generationDebitsKey(generation);
    const raw = await this.run('generationDebits', () => this.client.get(this.k(key)));
    return raw === null ? null : parseCounter(key, raw);
  }

  async dropGeneration(generation: string): Promise<void> {
    assertGeneration(generation);
    const pattern = `${globEscape(this.k(generationKey(generation, '')))}*`;
    let cursor = '0';
    do {
      const [next, keys] = await this.run('dropGeneration', () =>
        this.client.scan(cursor, 'MATCH', pattern, 'COUNT', 1_000),
      );
      cursor = next;
      if (keys.length > 0) await this.run('dropGeneration', () => this.client.unlink(...keys));
    } while (cursor !== '0');
  }

  onReconnect(listener: () => void): void {
    this.reconnectListeners.push(listener);
  }

  async health(): Promise<{ ok: boolean; detail?: string; cause?: unknown }> {
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
      return { ok: false, detail: `redis at ${this.where}: ${errorMessage(error)}`, cause: error };
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
    // Redis's own words for a missing or wrong password (NOAUTH speaks of HELLO) do not say which
    // setting holds it: a server that refused the login is named so, with where the password goes.
    const login =
      this.lastError !== null && /^(NOAUTH|WRONGPASS)\b/.test(this.lastError)
        ? '; the server refused the login: put its user and password in REDIS_URL (redis://user:password@host:port)'
        : '';
    return `redis at ${this.where} is not connected (status ${this.client.status}${last})${login}`;
  }

  /**
   * A command that got no reply within its timeout means a server that holds the connection and
   * answers nothing (stopped, hung, a network that drops packets): the connection is dropped and
   * made again in the background, so the calls after it reject at once as not connected instead
   * of each waiting out its own timeout.
   */
  private dropHungConnection(operation: string): void {
    if (this.client.status !== 'ready') return;
    this.lastError = `${operation} got no reply within the command timeout`;
    this.logger?.warn(
      { operation },
      'redis cache command timed out: reconnecting; calls fail at once meanwhile',
    );
    // Destroyed, not ended: a stopped server never answers the FIN, so an ended socket would stay
    // half-open (status still ready) until it wakes; a destroyed one closes now and reconnects.
    this.client.stream?.destroy();
  }

  private async run<T>(operation: string, command: () => Promise<T>): Promise<T> {
    if (this.client.status !== 'ready') {
      throw new CacheUnavailableError(`redis cache ${operation} failed: ${this.unavailableDetail()}`);
    }
    try {
      return await command();
    } catch (error) {
      // Redis refusing the command itself is a bug to surface, not an outage (see refusedByRedis).
      if (refusedByRedis(error)) throw error;
      if (errorMessage(error) === 'Command timed out') this.dropHungConnection(operation);
      throw new CacheUnavailableError(
        `redis cache ${operation} failed at ${this.where}: ${errorMessage(error)}`,
        {
          cause: error,
        },
      );
    }
  }
}

/** Whether Redis answered the command (with an error): it ran, or was refused, and is over. */
function answeredByRedis(err: unknown): boolean {
  const cause = err instanceof CacheUnavailableError ? err.cause : err;
  return cause instanceof Error && cause.name === 'ReplyError';
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

function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
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
  return maskUrlCredentials(url);
}

/** The database a refused SELECT asked for (ioredis sends it before a connection is ready), else null. */
function refusedDatabase(error: Error): string | null {
  const command = (error as { command?: { name?: unknown; args?: unknown[] } }).command;
  return error.name === 'ReplyError' && command?.name === 'select' ? String(command.args?.[0]) : null;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Opens the Redis cache. Waits for the first connection attempt (bounded by the connect timeout)
 * so the first commands find a ready connection, but does not throw when Redis is down: the
 * adapter then reports unhealthy, rejects commands at once and keeps reconnecting. An abort of
 * `signal` during that wait ends it: the client is disconnected and the signal's reason thrown.
 */
export async function connectRedisCache(options: RedisCacheOptions): Promise<RedisCache> {
  const cache = new RedisCache(options);
  await cache.connect(options.signal);
  return cache;
}
