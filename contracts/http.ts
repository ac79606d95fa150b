import { z } from 'zod';

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
 * A body that may be left out: no body (or an empty one under `application/json`) reads as `{}`,
 * so a bodiless POST reaches its route instead of being refused as a missing object.
 */
export function optionalBody<T extends z.ZodType>(schema: T) {
  return z.preprocess((value) => value ?? {}, schema);
}
