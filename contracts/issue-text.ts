import type { z } from 'zod';

/**
 * The words of every refused input field, on every channel (HTTP routes, MCP tool arguments, the
 * pay-per-call bodies): what the field must be and what was given, e.g.
 * `after_seq must be a whole number ≥ 0; got "abc"` or `min_confidence must be a whole number
 * from 0 to 100; got 50.5`. zod's own words ("Invalid input: expected number, received NaN",
 * "expected int, received number") name its types and the value after coercion, not what the
 * caller sent. What the field must be is read from the schema that refused it (its type, bounds,
 * integer check, allowed values), or else from the issue; what was given is read from the input
 * as the caller sent it (a query parameter's text before coercion). A message a schema writes
 * itself is kept, led by the field unless it names the field first; a pattern's (a regex check's
 * words, what the text must be) is followed by what was sent, as the rest are.
 */

/** A zod issue as the channels see it (a ZodError's, or one carried through Fastify's validation). */
export interface IssueLike {
  code: string;
  path: readonly PropertyKey[];
  message: string;
  expected?: string;
  format?: string;
  origin?: string;
  minimum?: number | bigint;
  maximum?: number | bigint;
  inclusive?: boolean;
  values?: readonly unknown[];
  keys?: readonly string[];
}

/** zod's own English messages (its locale's), as opposed to the words a schema writes. */
const ZOD_WORDS = /^(Invalid\b|Too (big|small)\b|Unrecognized keys?\b)/;

/** Whether `message` is zod's default wording rather than the schema's own. */
export const isZodWording = (message: string) => ZOD_WORDS.test(message);

type Def = {
  type: string;
  innerType?: z.ZodType;
  in?: z.ZodType;
  out?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  element?: z.ZodType;
  options?: z.ZodType[];
  entries?: Record<string, unknown>;
  values?: unknown[];
  checks?: z.ZodType[];
  format?: string;
  getter?: () => z.ZodType;
};
type CheckDef = {
  check?: string;
  format?: string;
  value?: number;
  inclusive?: boolean;
  minimum?: number;
  maximum?: number;
  pattern?: RegExp;
};

const defOf = (schema: z.ZodType) => (schema as unknown as { _zod: { def: Def } })._zod.def;

/** A transform, or a pipe whose last step is one (`z.string().regex(…).transform(Number)`). */
function endsInTransform(schema: z.ZodType): boolean {
  const def = defOf(schema);
  return (
    def.type === 'transform' || (def.type === 'pipe' && def.out !== undefined && endsInTransform(def.out))
  );
}

/** The schema under the wrappers that do not change what a value must be. */
function unwrap(schema: z.ZodType): { schema: z.ZodType; nullable: boolean } {
  let nullable = false;
  for (let i = 0; i < 32; i++) {
    const def = defOf(schema);
    if (def.type === 'nullable') nullable = true;
    if (
      ['optional', 'nullable', 'default', 'prefault', 'readonly', 'catch', 'nonoptional'].includes(
        def.type,
      ) &&
      def.innerType
    ) {
      schema = def.innerType;
    } else if (def.type === 'pipe' && def.in && def.out) {
      // A preprocess (a transform, then the schema; or a text checked, transformed, then the
      // schema, as a setting's decimal digits to a number): the schema says what the value must be.
      schema = endsInTransform(def.in) ? def.out : def.in;
    } else if (def.type === 'lazy' && def.getter) {
      schema = def.getter();
    } else break;
  }
  return { schema, nullable };
}

/** The schema of the field at `path` under `root`, or undefined when it cannot be told. */
function schemaAt(root: z.ZodType, path: readonly PropertyKey[]): z.ZodType | undefined {
  let schema: z.ZodType | undefined = root;
  for (const key of path) {
    if (schema === undefined) return undefined;
    const def = defOf(unwrap(schema).schema);
    if (def.type === 'object' && def.shape)
      schema = Object.hasOwn(def.shape, key) ? def.shape[key as string] : undefined;
    else if (def.type === 'array' && def.element && typeof key === 'number') schema = def.element;
    else return undefined;
  }
  return schema;
}

const checksOf = (schema: z.ZodType) =>
  (defOf(schema).checks ?? []).map((c) => (c as unknown as { _zod: { def: CheckDef } })._zod.def);

const show = (value: unknown) => (typeof value === 'string' ? JSON.stringify(value) : String(value));

/** "from 1 to 200", "≥ 0", "> 0 and ≤ 5": the bounds of a number or a count. */
function bounds(lo?: { value: number; inclusive: boolean }, hi?: { value: number; inclusive: boolean }) {
  if (lo && hi && lo.inclusive && hi.inclusive) return `from ${lo.value} to ${hi.value}`;
  const parts: string[] = [];
  if (lo) parts.push(`${lo.inclusive ? '≥' : '>'} ${lo.value}`);
  if (hi) parts.push(`${hi.inclusive ? '≤' : '<'} ${hi.value}`);
  return parts.join(' and ');
}

function lengthBounds(schema: z.ZodType, unit: string) {
  let min: number | undefined;
  let max: number | undefined;
  for (const c of checksOf(schema)) {
    if (c.check === 'min_length') min = c.minimum;
    else if (c.check === 'max_length') max = c.maximum;
    else if (c.check === 'length_equals') min = max = (c as { length?: number }).length;
  }
  if (min === undefined && max === undefined) return '';
  const units = (n: number | undefined) => (n === 1 ? unit.replace(/s$/, '') : unit);
  if (min === max) return ` of exactly ${min} ${units(min)}`;
  if (min !== undefined && max !== undefined) return ` of ${min} to ${max} ${unit}`;
  return min !== undefined ? ` of at least ${min} ${units(min)}` : ` of at most ${max} ${units(max)}`;
}

const FORMATS: Record<string, string> = {
  url: 'a URL',
  email: 'an email address',
  uuid: 'a UUID',
  guid: 'a UUID',
  datetime: 'an ISO 8601 date-time such as 2026-01-31T12:00:00Z',
  date: 'a date as YYYY-MM-DD',
  time: 'a time as HH:MM:SS',
  ipv4: 'an IPv4 address',
  ipv6: 'an IPv6 address',
  base64: 'base64 text',
  base64url: 'base64url text',
  hex: 'hexadecimal text',
};

/**
 * What a value of `schema` must be, in words ("a whole number from 0 to 100"), or null.
 * `broke`: the side of a bound the value broke, so a safe-integer bound on that side is named
 * too (see plain).
 */
export function requirement(root: z.ZodType, broke?: Broke): string | null {
  const { schema, nullable } = unwrap(root);
  const text = plain(schema, broke);
  return text === null ? null : nullable ? `${text}, or null` : text;
}

/** The side of a bound a value broke: above a maximum (too_big) or below a minimum (too_small). */
type Broke = 'above' | 'below';

function plain(schema: z.ZodType, broke?: Broke): string | null {
  const def = defOf(schema);
  switch (def.type) {
    case 'number': {
      let int = false;
      let lo: { value: number; inclusive: boolean } | undefined;
      let hi: { value: number; inclusive: boolean } | undefined;
      for (const c of checksOf(schema)) {
        if (c.check === 'number_format' && /int/.test(c.format ?? '')) int = true;
        else if (c.check === 'greater_than' && typeof c.value === 'number') {
          if (!lo || c.value > lo.value) lo = { value: c.value, inclusive: c.inclusive === true };
        } else if (c.check === 'less_than' && typeof c.value === 'number') {
          if (!hi || c.value < hi.value) hi = { value: c.value, inclusive: c.inclusive === true };
        }
      }
      // int() bounds a value to the safe integers without a check of either kind above.
      if (checksOf(schema).some((c) => c.check === 'number_format' && c.format === 'safeint')) {
        lo ??= { value: Number.MIN_SAFE_INTEGER, inclusive: true };
        hi ??= { value: Number.MAX_SAFE_INTEGER, inclusive: true };
      }
      // The safe-integer bounds are no bound a caller needs told, unless the value broke that one
      // (`after_seq=99999999999999999999` is a whole number ≥ 0, and too large).
      if (broke !== 'below' && lo && lo.value <= Number.MIN_SAFE_INTEGER) lo = undefined;
      if (broke !== 'above' && hi && hi.value >= Number.MAX_SAFE_INTEGER) hi = undefined;
      const range = bounds(lo, hi);
      return `${int ? 'a whole number' : 'a number'}${range ? ` ${range}` : ''}`;
    }
    case 'string': {
      const format = def.format ?? checksOf(schema).find((c) => c.check === 'string_format')?.format;
      const named = format ? FORMATS[format] : undefined;
      if (named) return named;
      return `a string${lengthBounds(schema, 'characters')}`;
    }
    case 'boolean':
      return 'true or false';
    case 'null':
      return 'null';
    case 'enum':
      return oneOf(Object.values(def.entries ?? {}));
    case 'literal':
      return oneOf(def.values ?? []);
    case 'object':
      return 'an object';
    case 'array': {
      const each = def.element ? requirement(def.element) : null;
      return `a list${lengthBounds(schema, 'items')}${each ? `, each ${each}` : ''}`;
    }
    case 'union': {
      const options = (def.options ?? []).map((option) => requirement(option));
      if (options.some((o) => o === null) || options.length === 0) return null;
      return options.join(', or ');
    }
    default:
      return null;
  }
}

function oneOf(values: readonly unknown[]): string {
  const shown = values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v)));
  return shown.length === 1 ? `exactly ${shown[0]}` : `one of ${shown.join(', ')}`;
}

/** What a field must be, read from the issue alone (no schema to read it from). */
function fromIssue(issue: IssueLike): string | null {
  const n = (v: number | bigint | undefined) => (v === undefined ? undefined : Number(v));
  const counted = issue.origin === 'string' ? 'characters' : issue.origin === 'number' ? '' : 'items';
  switch (issue.code) {
    case 'invalid_type':
      if (issue.expected === 'int') return 'a whole number';
      return (
        {
          number: 'a number',
          string: 'a string',
          boolean: 'true or false',
          array: 'a list',
          object: 'an object',
        }[issue.expected ?? ''] ?? null
      );
    case 'invalid_value':
      return issue.values ? oneOf(issue.values) : null;
    case 'invalid_format':
      return (issue.format && FORMATS[issue.format]) ?? null;
    case 'too_small': {
      const min = n(issue.minimum);
      if (min === undefined) return null;
      const op = issue.inclusive === false ? '>' : '≥';
      return counted ? `at least ${min} ${counted}` : `${op} ${min}`;
    }
    case 'too_big': {
      const max = n(issue.maximum);
      if (max === undefined) return null;
      const op = issue.inclusive === false ? '<' : '≤';
      return counted ? `at most ${max} ${counted}` : `${op} ${max}`;
    }
    default:
      return null;
  }
}

/** The value at `path` under `input` as the caller sent it; `present` false when there is none. */
function givenAt(input: unknown, path: readonly PropertyKey[]): { present: boolean; value?: unknown } {
  let value = input;
  for (const key of path) {
    if (typeof value !== 'object' || value === null || !Object.hasOwn(value, key)) return { present: false };
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value === undefined ? { present: false } : { present: true, value };
}

/** A value as the message shows it: text quoted, a number as it is, a long one cut. */
function given(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'object' ? JSON.stringify(value) : show(value);
  } catch {
    text = Array.isArray(value) ? 'a list' : 'an object';
  }
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}

/**
 * What the field of a refused value must be, in words: read from `schema` (the input's, when
 * known) at the issue's path, else from the issue; null when neither tells.
 */
export function issueRequirement(issue: IssueLike, schema?: z.ZodType): string | null {
  const at = schema ? schemaAt(schema, issue.path) : undefined;
  const broke = issue.code === 'too_big' ? 'above' : issue.code === 'too_small' ? 'below' : undefined;
  return (at && requirement(at, broke)) ?? fromIssue(issue);
}

/**
 * The message for a refused field. `field` is the name it is answered under (the issue's path,
 * or the input as a whole when it has none); `schema` the input's schema and `input` the input as
 * sent, both when known.
 */
export function issueText(issue: IssueLike, field: string, schema?: z.ZodType, input?: unknown): string {
  if (!isZodWording(issue.message)) {
    // A pattern's own words say what the text must be ("0x-prefixed hex"): with what was sent, as
    // every other refused value is worded. Other words of a schema (a refine's) are kept as written.
    const sent = issue.code === 'invalid_format' && input !== undefined ? givenAt(input, issue.path) : null;
    if (sent?.present) return `${field} must be ${issue.message}; got ${given(sent.value)}`;
    // Words that name the field already ("exchanges must not repeat") are not led by it again.
    return issue.message.startsWith(`${field} `) ? issue.message : `${field}: ${issue.message}`;
  }
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys ?? [];
    return `unknown field${keys.length === 1 ? '' : 's'} ${keys.map((k) => JSON.stringify(k)).join(', ')}`;
  }
  const must = issueRequirement(issue, schema);
  const sent: { present: boolean; value?: unknown; unknown?: true } =
    input === undefined ? { present: false, unknown: true } : givenAt(input, issue.path);
  if (must === null) {
    return sent.present
      ? `${field} is not accepted as given; got ${given(sent.value)}`
      : `${field} is not valid`;
  }
  if (!sent.present) {
    // Absent from what was sent (or what was sent is not known): a field left out is required.
    return sent.unknown ? `${field} must be ${must}` : `${field} is required: it must be ${must}`;
  }
  return `${field} must be ${must}; got ${given(sent.value)}`;
}
