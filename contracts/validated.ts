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

/** `schema.safeParse(raw)`, remembering a successful result as produced by `schema`. */
export function safeParseRemembered<S extends z.ZodType>(
  schema: S,
  raw: unknown,
): z.ZodSafeParseResult<z.output<S>> {
  const result = schema.safeParse(raw);
  if (result.success) remember(schema, result.data);
  return result;
}

/** `raw` itself when `schema` produced it, else `schema.parse(raw)` (throwing as parse does). */
export function parseOnce<S extends z.ZodType>(schema: S, raw: unknown): z.output<S> {
  if (typeof raw === 'object' && raw !== null && produced.get(schema)?.has(raw)) return raw as z.output<S>;
  return schema.parse(raw);
}
