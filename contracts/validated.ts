import type { z } from 'zod';

/**
 * Objects a schema produced, by schema: a value that came out of `schema` needs no second pass
 * through it. A tool call's arguments are parsed where they enter (the MCP channel answers bad
 * ones as -32602, the x402 route as 400) and the engine parses its input again so that no caller
 * can skip validation; profiled, the second parse of the same object cost a keyed MCP call ~1 %.
 * Parsed values are treated as immutable: nobody changes an object a schema produced.
 */
const produced = new WeakMap<z.ZodType, WeakSet<object>>();

function remember<T>(schema: z.ZodType, value: T): T {
  if (typeof value === 'object' && value !== null) {
    let set = produced.get(schema);
    if (set === undefined) {
      set = new WeakSet();
      produced.set(schema, set);
    }
    set.add(value);
  }
  return value;
}

/**
 * Successful parses of flat arguments (every value a string, number, boolean or null), by schema
 * and by the arguments' keys and values: callers repeat the same few argument sets (a coin, a
 * timeframe, a venue), and zod took ~7 µs of a keyed MCP call to say the same thing again. A
 * parse of a flat input is a function of those keys and values alone. Only flat results are kept,
 * and each call gets a copy of its own (a tool may change its arguments; the next call must not
 * see it), made in a fraction of the parse's time.
 */
const flatParses = new WeakMap<z.ZodType, Map<string, Record<string, unknown>>>();
const MAX_FLAT_PARSES = 1_024;
const MAX_FLAT_KEYS = 16;

/** The key of flat arguments, or null when they are not flat (then they are parsed every time). */
function flatKey(raw: unknown): string | null {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return null;
  if (Object.getPrototypeOf(raw) !== Object.prototype) return null;
  let key = '';
  let count = 0;
  for (const name in raw) {
    if (!Object.hasOwn(raw, name)) return null;
    if (++count > MAX_FLAT_KEYS) return null;
    const value = (raw as Record<string, unknown>)[name];
    let part: string;
    if (typeof value === 'string') part = `s${value}`;
    else if (typeof value === 'number') part = Object.is(value, -0) ? 'n-0' : `n${value}`;
    else if (typeof value === 'boolean') part = value ? 'b1' : 'b0';
    else if (value === null) part = 'z';
    else return null;
    // Names and strings are JSON-escaped: no separator inside them can be mistaken for a boundary.
    key += `${JSON.stringify(name)}:${part.length}:${part}\u0000`;
  }
  return key;
}

function isFlat(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  for (const name in value) {
    const v = (value as Record<string, unknown>)[name];
    if (typeof v === 'object' && v !== null) return false;
    if (typeof v === 'function' || typeof v === 'symbol') return false;
  }
  return true;
}

/** `schema.safeParse(raw)`, remembering a successful result as produced by `schema`. */
export function safeParseRemembered<S extends z.ZodType>(
  schema: S,
  raw: unknown,
): z.ZodSafeParseResult<z.output<S>> {
  const key = flatKey(raw);
  let parses = flatParses.get(schema);
  if (key !== null) {
    const known = parses?.get(key);
    if (known !== undefined) {
      return { success: true, data: remember(schema, { ...known }) } as z.ZodSafeParseSuccess<z.output<S>>;
    }
  }
  const result = schema.safeParse(raw);
  if (!result.success) return result;
  remember(schema, result.data);
  if (key !== null && isFlat(result.data)) {
    if (parses === undefined) {
      parses = new Map();
      flatParses.set(schema, parses);
    }
    if (parses.size >= MAX_FLAT_PARSES) parses.clear();
    // A copy: the caller's own object may be changed by its tool.
    parses.set(key, { ...result.data });
  }
  return result;
}

/** `raw` itself when `schema` produced it, else `schema.parse(raw)` (throwing as parse does). */
export function parseOnce<S extends z.ZodType>(schema: S, raw: unknown): z.output<S> {
  if (typeof raw === 'object' && raw !== null && produced.get(schema)?.has(raw)) return raw as z.output<S>;
  return schema.parse(raw);
}
