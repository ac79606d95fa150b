import type { z } from 'zod';
import { setBounded } from '../shared/bounded-map.ts';

/**
 * Tool inputs already validated, remembered by the JSON text they were read from: a customer
 * repeats the same few arguments, and each read costs a schema parse on the hot path (on the MCP
 * path ~4–5 µs of a keyed call in the service, against ~0.2 µs for the same parse alone, see
 * git log -p bench/README.md). Only inputs a tool's schema accepted are remembered (a refusal is built afresh,
 * with its issues), only flat ones (every value a primitive), so a copy by spread shares nothing:
 * what one run changes, the next never sees. The schemas of the tools are pure (no refinement
 * reads a clock or a store), so the same text always validates to the same input.
 */

/** Texts this long or shorter are remembered; a longer one is parsed every time. */
export const REMEMBERED_TEXT_CHARS = 1_024;
/** Distinct texts remembered per schema; past this, the oldest goes (a client chooses the text). */
export const REMEMBERED_INPUTS = 256;

type Flat = Record<string, string | number | boolean | null>;

const remembered = new WeakMap<z.ZodType, Map<string, Flat>>();

/** A copy of the input `schema` accepted for `text` before, or undefined. */
export function recall(schema: z.ZodType, text: string): Flat | undefined {
  const known = remembered.get(schema)?.get(text);
  return known === undefined ? undefined : { ...known };
}

/** Remembers what `schema` made of `text`, when the text is short and the input flat. */
export function remember(schema: z.ZodType, text: string, input: unknown): void {
  if (text.length > REMEMBERED_TEXT_CHARS || !isFlat(input)) return;
  let inputs = remembered.get(schema);
  if (inputs === undefined) {
    inputs = new Map();
    remembered.set(schema, inputs);
  }
  setBounded(inputs, text, { ...input }, REMEMBERED_INPUTS);
}

/**
 * The JSON text of arguments that arrived already parsed (an MCP call's `arguments`), or null
 * when it would not stand for them exactly (see isFlat), or is past the remembered length.
 */
export function argumentsText(args: unknown): string | null {
  if (!isFlat(args)) return null;
  const text = JSON.stringify(args);
  return text.length > REMEMBERED_TEXT_CHARS ? null : text;
}

/**
 * A plain object whose own values are all strings, numbers, booleans or null, each of which its
 * JSON text gives back as itself: not a non-finite number (JSON writes null) nor -0 (it writes 0).
 */
function isFlat(value: unknown): value is Flat {
  if (value === null || typeof value !== 'object' || Object.getPrototypeOf(value) !== Object.prototype)
    return false;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) return false;
    const field = (value as Record<string, unknown>)[key];
    if (typeof field === 'number') {
      if (!Number.isFinite(field) || Object.is(field, -0)) return false;
    } else if (field !== null && typeof field !== 'string' && typeof field !== 'boolean') return false;
  }
  return true;
}
