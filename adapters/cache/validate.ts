import type { QuotaWindow } from './port.ts';

/**
 * Argument checks shared by every cache adapter, so that a bad call fails the same way (a
 * RangeError before any I/O) on the in-process adapter and on Redis.
 */

export function assertKey(key: string): void {
  if (typeof key !== 'string' || key.length === 0)
    throw new RangeError('cache key must be a non-empty string');
}

export function assertTtl(ttlMs: number | undefined): void {
  if (ttlMs === undefined) return;
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new RangeError(`ttlMs must be a positive integer (got ${String(ttlMs)})`);
  }
}

function assertExpiresAt(key: string, expiresAt: number): void {
  if (!Number.isSafeInteger(expiresAt) || expiresAt <= 0) {
    throw new RangeError(
      `window ${key}: expiresAt must be a positive integer Unix ms (got ${String(expiresAt)})`,
    );
  }
}

function assertCount(what: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${what} must be a non-negative integer (got ${String(value)})`);
  }
}

function assertDistinct(keys: string[]): void {
  // A key listed twice would be checked once but debited twice.
  const seen = new Set<string>();
  for (const key of keys) {
    assertKey(key);
    if (seen.has(key)) throw new RangeError(`window ${key} is listed twice`);
    seen.add(key);
  }
}

export function assertDebit(windows: QuotaWindow[], amount: number): void {
  assertCount('amount', amount);
  assertDistinct(windows.map((w) => w.key));
  for (const window of windows) {
    assertCount(`window ${window.key}: limit`, window.limit);
    assertExpiresAt(window.key, window.expiresAt);
  }
}

export function assertRelease(keys: string[], amount: number): void {
  assertCount('amount', amount);
  assertDistinct(keys);
}

export function assertWindowKeys(keys: string[]): void {
  for (const key of keys) assertKey(key);
}

export function assertSetWindows(windows: { key: string; count: number; expiresAt: number }[]): void {
  assertDistinct(windows.map((w) => w.key));
  for (const window of windows) {
    assertCount(`window ${window.key}: count`, window.count);
    assertExpiresAt(window.key, window.expiresAt);
  }
}

const INTEGER = /^-?\d+$/;

/** A stored counter as a number; anything else in the slot is a caller's bug, not zero. */
export function parseCounter(key: string, raw: string | null): number {
  if (raw === null) return 0;
  const value = Number(raw);
  if (!INTEGER.test(raw) || !Number.isSafeInteger(value)) {
    throw new TypeError(`cache key ${key} holds ${JSON.stringify(raw)}, not a quota counter`);
  }
  return value;
}
