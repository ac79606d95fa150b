import { z } from 'zod';
import type { ErrorCode } from './errors.ts';

/**
 * An integer query parameter within bounds: documented as an integer (a generated client sends a
 * number), read from the query's text. An empty value is refused rather than read as 0.
 */
export function queryInt(min: number, max: number) {
  return z.preprocess(
    (value) => (value === '' ? Number.NaN : value),
    z.coerce.number().int().min(min).max(max),
  );
}

/**
 * A query parameter given once: `?limit=2&limit=3` is refused (INVALID_PARAMETER naming it) rather
 * than read as either. Every route with a query schema wraps its parameters in it, and declares
 * `codes: { unknown: 'UNKNOWN_FILTER' }` so that a parameter it does not know is refused too.
 */
export function queryOnce<T extends z.ZodType>(schema: T) {
  const code: ErrorCode = 'INVALID_PARAMETER';
  return z.preprocess((value, ctx) => {
    if (!Array.isArray(value)) return value;
    ctx.addIssue({ code: 'custom', message: 'given more than once', params: { code } });
    return undefined;
  }, schema);
}

/**
 * A body that may be left out: no body (or an empty one under `application/json`) reads as `{}`,
 * so a bodiless POST reaches its route instead of being refused as a missing object.
 */
export function optionalBody<T extends z.ZodType>(schema: T) {
  return z.preprocess((value) => value ?? {}, schema);
}
