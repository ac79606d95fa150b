import {
  type Cache,
  CacheUnavailableError,
  type CounterGeneration,
  CounterStateLostError,
  type DebitResult,
  type QuotaWindow,
  REFUND_ID_TTL_MS,
} from './port.ts';
import {
  assertAddWindows,
  assertCount,
  assertDebit,
  assertGeneration,
  assertKey,
  assertMarker,
  assertRelease,
  assertSetWindows,
  assertTtl,
  assertWindowKeys,
  BUILDING_TTL_MS,
  generationBuildingKey,
  generationDebitsKey,
  generationKey,
  markerKey,
  parseCounter,
  parseMarker,
  refundIdKey,
} from './validate.ts';

interface Entry {
  value: string;
  /** Unix ms; null = no expiry. */
  expiresAt: number | null;
}

export interface MemoryCacheOptions {
  /** Wall clock in Unix ms; tests of callers may pass a controllable one. */
  now?: () => number;
  /** How often expired entries are dropped (reads ignore them regardless). */
  sweepIntervalMs?: number;
}

/**
 * The in-process adapter for the single-process deployment. Every method runs to completion
 * without awaiting, so each primitive is atomic with respect to the others, as on Redis.
 */
/** Frozen window lists already checked by assertDebit (see debitLive). */
const validWindows = new WeakSet<QuotaWindow[]>();

export class MemoryCache implements Cache {
  readonly kind = 'memory' as const;
  private readonly entries = new Map<string, Entry>();
  private readonly now: () => number;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;
  /** Window lists mapped under the generation they were last debited in (see inGeneration). */
  private readonly generationWindows = new WeakMap<
    QuotaWindow[],
    { generation: string; windows: QuotaWindow[] }
  >();
  private debitsKey: { generation: string; key: string } | null = null;

  constructor(options: MemoryCacheOptions = {}) {
    this.now = options.now ?? Date.now;
    this.sweeper = setInterval(() => this.sweep(), options.sweepIntervalMs ?? 60_000);
    this.sweeper.unref();
  }

  async get(key: string): Promise<string | null> {
    this.assertOpen();
    assertKey(key);
    return this.live(key)?.value ?? null;
  }

  async set(key: string, value: string, options: { ttlMs?: number } = {}): Promise<void> {
    this.assertOpen();
    assertKey(key);
    assertTtl(options.ttlMs);
    this.entries.set(key, { value, expiresAt: this.expiry(options.ttlMs) });
  }

  async setIfAbsent(key: string, value: string, options: { ttlMs?: number } = {}): Promise<boolean> {
    this.assertOpen();
    assertKey(key);
    assertTtl(options.ttlMs);
    if (this.live(key)) return false;
    this.entries.set(key, { value, expiresAt: this.expiry(options.ttlMs) });
    return true;
  }

  async delete(key: string): Promise<void> {
    this.assertOpen();
    assertKey(key);
    this.entries.delete(key);
  }

  async debitWindows(windows: QuotaWindow[], amount: number): Promise<DebitResult> {
    return this.debitWindowsNow(windows, amount);
  }

  /** debitWindows without a promise: the rate limiter decides an in-process request at once. */
  debitWindowsNow(windows: QuotaWindow[], amount: number): DebitResult {
    this.assertOpen();
    assertDebit(windows, amount);
    return this.debitNow(windows, amount);
  }

  private debitNow(windows: QuotaWindow[], amount: number): DebitResult {
    const counts = windows.map((w) => parseCounter(w.key, this.live(w.key)?.value ?? null));
    const refusedBy = windows.findIndex((w, i) => counts[i]! + amount > w.limit);
    if (refusedBy !== -1) return { ok: false, counts, refusedBy };
    if (amount === 0) return { ok: true, counts, refusedBy: null };
    // A window's expiry is set when its counter is created, as the Redis script does.
    for (let i = 0; i < windows.length; i++) this.addNow(windows[i]!.key, amount, windows[i]!.expiresAt);
    return { ok: true, counts: counts.map((count) => count + amount), refusedBy: null };
  }

  async releaseWindows(keys: string[], amount: number): Promise<number[]> {
    this.assertOpen();
    assertRelease(keys, amount);
    return keys.map((key) => {
      const entry = this.live(key);
      if (!entry) return 0;
      const count = Math.max(0, parseCounter(key, entry.value) - amount);
      entry.value = String(count);
      return count;
    });
  }

  async readWindows(keys: string[]): Promise<number[]> {
    this.assertOpen();
    assertWindowKeys(keys);
    return keys.map((key) => parseCounter(key, this.live(key)?.value ?? null));
  }

  async setWindows(windows: { key: string; count: number; expiresAt: number }[]): Promise<void> {
    this.assertOpen();
    assertSetWindows(windows);
    for (const window of windows) {
      this.entries.set(window.key, { value: String(window.count), expiresAt: window.expiresAt });
    }
  }

  async liveGeneration(family: string): Promise<CounterGeneration | null> {
    this.assertOpen();
    return parseMarker(this.live(markerKey(family))?.value ?? null);
  }

  async debitLive(
    family: string,
    windows: QuotaWindow[],
    amount: number,
  ): Promise<DebitResult & { generation: string }> {
    this.assertOpen();
    if (!validWindows.has(windows)) {
      assertDebit(windows, amount);
      // A frozen list of frozen windows cannot change: checked once, whatever debits it later.
      if (Object.isFrozen(windows) && windows.every((w) => Object.isFrozen(w))) validWindows.add(windows);
    } else assertCount('amount', amount);
    const generation = this.liveId(family);
    const result = this.debitNow(this.inGeneration(generation, windows), amount);
    if (result.ok && amount > 0) this.addNow(this.debitsKeyOf(generation), amount, null);
    return { ...result, generation };
  }

  /**
   * The windows under a generation's keys. A list the quota meter hands in again and again (frozen,
   * one per subject) is mapped once per generation: every keyed call debits the same two counters,
   * and spelling their ~110-character keys anew (then hashing them in each lookup) showed in the
   * keyed profiles.
   */
  private inGeneration(generation: string, windows: QuotaWindow[]): QuotaWindow[] {
    const known = this.generationWindows.get(windows);
    if (known !== undefined && known.generation === generation) return known.windows;
    const mapped = windows.map((w) => ({ ...w, key: generationKey(generation, w.key) }));
    if (validWindows.has(windows)) this.generationWindows.set(windows, { generation, windows: mapped });
    return mapped;
  }

  private debitsKeyOf(generation: string): string {
    const known = this.debitsKey;
    if (known !== null && known.generation === generation) return known.key;
    const key = generationDebitsKey(generation);
    this.debitsKey = { generation, key };
    return key;
  }

  async releaseLive(family: string, generation: string, keys: string[], amount: number): Promise<boolean> {
    this.assertOpen();
    assertGeneration(generation);
    assertRelease(keys, amount);
    if (parseMarker(this.live(markerKey(family))?.value ?? null)?.id !== generation) return false;
    for (const key of [...keys.map((k) => generationKey(generation, k)), generationDebitsKey(generation)]) {
      const entry = this.live(key);
      if (entry) entry.value = String(Math.max(0, parseCounter(key, entry.value) - amount));
    }
    return true;
  }

  async refundLive(family: string, keys: string[], amount: number, id?: string): Promise<string | null> {
    this.assertOpen();
    assertRelease(keys, amount);
    const generation = parseMarker(this.live(markerKey(family))?.value ?? null)?.id ?? null;
    if (generation === null) return null;
    if (id !== undefined) {
      const once = refundIdKey(family, id);
      const first = this.live(once);
      if (first) return first.value;
      this.entries.set(once, { value: generation, expiresAt: this.now() + REFUND_ID_TTL_MS });
    }
    for (const key of keys.map((k) => generationKey(generation, k))) {
      const entry = this.live(key);
      if (entry) entry.value = String(Math.max(0, parseCounter(key, entry.value) - amount));
    }
    if (amount > 0) this.addNow(generationDebitsKey(generation), amount, null);
    return generation;
  }

  async beginGeneration(generation: string): Promise<void> {
    this.assertOpen();
    assertGeneration(generation);
    this.entries.set(generationBuildingKey(generation), {
      value: '1',
      expiresAt: this.now() + BUILDING_TTL_MS,
    });
  }

  async readLive(family: string, keys: string[]): Promise<number[]> {
    this.assertOpen();
    assertWindowKeys(keys);
    const generation = this.liveId(family);
    return keys.map((key) => parseCounter(key, this.live(generationKey(generation, key))?.value ?? null));
  }

  async addToGeneration(
    generation: string,
    windows: { key: string; count: number; expiresAt: number }[],
  ): Promise<void> {
    this.assertOpen();
    assertGeneration(generation);
    assertAddWindows(windows);
    for (const w of windows) {
      const key = generationKey(generation, w.key);
      if (w.count >= 0) {
        this.addNow(key, w.count, w.expiresAt);
        continue;
      }
      const entry = this.live(key);
      if (entry) entry.value = String(Math.max(0, parseCounter(key, entry.value) + w.count));
    }
  }

  async switchGeneration(family: string, expected: string | null, next: CounterGeneration): Promise<boolean> {
    this.assertOpen();
    assertMarker(next);
    const key = markerKey(family);
    const current = parseMarker(this.live(key)?.value ?? null);
    if ((current?.id ?? null) !== expected) return false;
    if (!this.live(generationBuildingKey(next.id))) return false;
    this.entries.delete(generationBuildingKey(next.id));
    this.entries.set(key, {
      value: JSON.stringify({ id: next.id, position: next.position }),
      expiresAt: null,
    });
    return true;
  }

  async generationDebits(generation: string): Promise<number | null> {
    this.assertOpen();
    assertGeneration(generation);
    const entry = this.live(generationDebitsKey(generation));
    return entry ? parseCounter(generationDebitsKey(generation), entry.value) : null;
  }

  async dropGeneration(generation: string): Promise<void> {
    this.assertOpen();
    assertGeneration(generation);
    const start = generationKey(generation, '');
    for (const key of this.entries.keys()) if (key.startsWith(start)) this.entries.delete(key);
  }

  onReconnect(_listener: () => void): void {
    // Nothing to reconnect: the counters live and die with this process.
  }

  async health(): Promise<{ ok: boolean; detail?: string }> {
    return this.closed ? { ok: false, detail: 'memory cache is closed' } : { ok: true };
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    this.entries.clear();
  }

  private liveId(family: string): string {
    const marker = parseMarker(this.live(markerKey(family))?.value ?? null);
    if (!marker) throw new CounterStateLostError(family);
    return marker.id;
  }

  /** INCRBY with the expiry set when the counter is created, as the Redis scripts do. */
  private addNow(key: string, amount: number, expiresAt: number | null): void {
    const entry = this.live(key);
    if (entry) entry.value = String(parseCounter(key, entry.value) + amount);
    else this.entries.set(key, { value: String(amount), expiresAt });
  }

  /** Like Redis, an entry is still there at its expiry instant and gone one millisecond later. */
  private live(key: string): Entry | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt !== null && entry.expiresAt < this.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry;
  }

  private expiry(ttlMs: number | undefined): number | null {
    return ttlMs === undefined ? null : this.now() + ttlMs;
  }

  private sweep(): void {
    const now = this.now();
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt !== null && entry.expiresAt < now) this.entries.delete(key);
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new CacheUnavailableError('memory cache is closed');
  }
}

export function createMemoryCache(options: MemoryCacheOptions = {}): MemoryCache {
  return new MemoryCache(options);
}
