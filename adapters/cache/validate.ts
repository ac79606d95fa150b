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

export function assertCount(what: string, value: number): void {
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

/** Like assertSetWindows, but a count may be negative: a rebuild replaying a refund gives units back. */
export function assertAddWindows(windows: { key: string; count: number; expiresAt: number }[]): void {
  assertDistinct(windows.map((w) => w.key));
  for (const window of windows) {
    if (!Number.isSafeInteger(window.count))
      throw new RangeError(`window ${window.key}: count must be an integer (got ${String(window.count)})`);
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

const GENERATION = /^[A-Za-z0-9-]{1,64}$/;

export function assertGeneration(id: string): void {
  if (typeof id !== 'string' || !GENERATION.test(id))
    throw new RangeError(`generation id must be 1-64 letters, digits or dashes (got ${JSON.stringify(id)})`);
}

export function assertMarker(marker: { id: string; position: number }): void {
  assertGeneration(marker.id);
  assertCount('generation position', marker.position);
}

/** Where a generation keeps a counter (`g:<generation>:<key>`), and the units debited on it. */
export const GENERATION_PREFIX = 'g:';

export function generationKey(generation: string, key: string): string {
  return `${GENERATION_PREFIX}${generation}:${key}`;
}

export function generationDebitsKey(generation: string): string {
  return generationKey(generation, '#debits');
}

/**
 * Present while a rebuild fills a generation, from its first write to its switch: a server that
 * loses its data mid-build loses it too, so the switch can tell a complete generation from the
 * remains of one that was partly wiped.
 */
export function generationBuildingKey(generation: string): string {
  return generationKey(generation, '#building');
}

/** How long a build's sentinel outlives a rebuild that died before switching. */
export const BUILDING_TTL_MS = 24 * 60 * 60_000;

export function markerKey(family: string): string {
  assertKey(family);
  return `${family}:generation`;
}

/** Where a debit script call keeps what it debited until its answer came (see RedisCache.sendDebits). */
export function debitOutcomeKey(id: string): string {
  assertKey(id);
  return `debits:${id}`;
}

/** Where a refund's id is remembered (see Cache.refundLive). */
export function refundIdKey(family: string, id: string): string {
  assertKey(family);
  assertKey(id);
  return `${family}:refund:${id}`;
}

/**
 * The last marker parsed, by its stored text: the in-process cache reads the marker on every
 * debit, and parsing the same JSON each time showed in the keyed MCP profile. Frozen, as callers
 * share it.
 */
let lastMarker: { raw: string; marker: Readonly<{ id: string; position: number }> | null } | null = null;

/** A stored marker, or null when the slot holds something else (treated as lost). */
export function parseMarker(raw: string | null): Readonly<{ id: string; position: number }> | null {
  if (raw === null) return null;
  if (lastMarker !== null && lastMarker.raw === raw) return lastMarker.marker;
  const marker = parseMarkerText(raw);
  lastMarker = { raw, marker: marker && Object.freeze(marker) };
  return lastMarker.marker;
}

function parseMarkerText(raw: string): { id: string; position: number } | null {
  try {
    const value = JSON.parse(raw) as { id?: unknown; position?: unknown };
    if (typeof value.id === 'string' && GENERATION.test(value.id) && Number.isSafeInteger(value.position))
      return { id: value.id, position: value.position as number };
  } catch {
    // fall through: not a marker
  }
  return null;
}
