import type { z } from 'zod';

/**
 * A validity check compiled from a zod object schema that answers what `schema.safeParse(v)`
 * would, without building the copy zod returns. Reading the log back, every event is validated
 * and zod's copy (a payload object and an issues array per field, a new data object per event)
 * was most of the cost and a good part of the garbage of a rebuild.
 *
 * Containers (object, optional, nullable, union) are walked following zod's own rules. A leaf
 * (a string with its regex, a number with its bounds, an enum, a custom check...) first gets an
 * inlined condition built from the same check definitions zod runs, which may only say "valid"
 * when zod would; anything else is judged by zod itself, run on one reused payload (nothing is
 * allocated for a valid value). A schema holding anything more (arrays, defaults, transforms,
 * catch-alls, refinements on containers) is not compiled: its events keep zod's parse.
 * contracts/zod-check.unit.test.ts holds the compiled checks of the whole catalog to zod's answer
 * on thousands of valid, edge and malformed payloads.
 */
export type Verdict = typeof INVALID | typeof CLEAN | typeof EXTRA;
/** zod would refuse the value. */
export const INVALID = 0;
/** zod would accept it and return an equal value: the input can be used as it is. */
export const CLEAN = 1;
/** zod would accept it but strip unknown keys: only zod's parse gives the value it would. */
export const EXTRA = 2;

type Check = (value: unknown) => Verdict;
type Internals = {
  def: {
    type: string;
    checks?: unknown[];
    shape?: Record<string, z.ZodType>;
    catchall?: unknown;
    innerType?: z.ZodType;
    options?: z.ZodType[];
  };
  traits: Set<string>;
  optin?: string;
  optout?: string;
  run(payload: Payload, ctx: object): Payload | Promise<Payload>;
};
type Payload = { value: unknown; issues: unknown[] };

const LEAVES = new Set(['string', 'number', 'boolean', 'enum', 'literal', 'custom', 'null']);
const CTX = Object.freeze({ async: false });
/** One payload for every leaf run: a valid leaf leaves `issues` empty, so nothing is allocated. */
const shared: Payload = { value: undefined, issues: [] };

const internals = (schema: z.ZodType) => (schema as unknown as { _zod: Internals })._zod;
const noChecks = (zod: Internals) => !zod.def.checks || zod.def.checks.length === 0;

/** The compiled check of `schema`, or null when it holds something this does not compile. */
export function compileCheck(schema: z.ZodType): Check | null {
  const zod = internals(schema);
  const { def, traits } = zod;
  if (LEAVES.has(def.type)) return leaf(zod);
  if (!noChecks(zod)) return null;
  if (def.type === 'object' && traits.has('$ZodObject')) return object(def);
  if (def.type === 'optional' && traits.has('$ZodOptional') && !traits.has('$ZodExactOptional')) {
    const innerZod = internals(def.innerType!);
    if (innerZod.optin === 'defaulted') return null;
    const inner = compileCheck(def.innerType!);
    return inner && ((v) => (v === undefined ? CLEAN : inner(v)));
  }
  if (def.type === 'nullable' && traits.has('$ZodNullable')) {
    const inner = compileCheck(def.innerType!);
    return inner && ((v) => (v === null ? CLEAN : inner(v)));
  }
  if (
    def.type === 'union' &&
    traits.has('$ZodUnion') &&
    !traits.has('$ZodXor') &&
    !traits.has('$ZodDiscriminatedUnion')
  ) {
    // Plain `z.union` only (not xor / discriminated): valid when any option is, and zod then
    // returns that option's value, which for these leaves is the input.
    const options = def.options!.map(compileCheck);
    if (options.some((o) => o === null) || options.length === 0) return null;
    const checks = options as Check[];
    return (v) => {
      for (const check of checks) {
        const verdict = check(v);
        if (verdict !== INVALID) return verdict;
      }
      return INVALID;
    };
  }
  return null;
}

function leaf(zod: Internals): Check {
  const run = zod.run;
  return (v) => {
    shared.value = v;
    const out = run(shared, CTX);
    if (out !== shared || shared.issues.length > 0 || shared.value !== v) {
      // An issue, or a leaf that answered with another value or payload: not the plain case.
      const invalid = shared.issues.length > 0 || out instanceof Promise;
      shared.issues = [];
      return invalid ? INVALID : EXTRA;
    }
    return CLEAN;
  };
}

/** zod's checks of a schema: its own `def.checks`, led by the schema itself when it is a format. */
function checksOf(schema: z.ZodType): Internals[] {
  const zod = internals(schema);
  const checks = [...((zod.def.checks ?? []) as z.ZodType[])].map(internals);
  if (zod.traits.has('$ZodCheck')) checks.unshift(zod);
  return checks;
}

/** String formats whose zod check is exactly a test of `def.pattern`. */
const PATTERN_FORMATS = new Set(['regex', 'uuid', 'guid', 'datetime', 'date', 'time']);

type CheckDef = {
  check?: string;
  format?: string;
  pattern?: RegExp;
  value?: unknown;
  inclusive?: boolean;
  minimum?: number;
  maximum?: number;
  when?: unknown;
};

/**
 * A JavaScript condition on `x` that is true only when zod would accept `x` for `schema` with
 * its value unchanged, or null when there is none. It may be false for a value zod accepts (a
 * string whose length in code points needs counting): the caller then asks zod's own check.
 */
function fastCondition(schema: z.ZodType, x: string, consts: unknown[]): string | null {
  const zod = internals(schema);
  const def = zod.def as Internals['def'] & { coerce?: boolean };
  if (def.coerce) return null;
  const constant = (value: unknown) => `C[${consts.push(value) - 1}]`;
  const parts: string[] = [];
  switch (def.type) {
    case 'string':
      parts.push(`typeof ${x} === 'string'`);
      break;
    case 'number':
      parts.push(`typeof ${x} === 'number' && Number.isFinite(${x})`);
      break;
    case 'boolean':
      parts.push(`typeof ${x} === 'boolean'`);
      break;
    case 'enum':
    case 'literal':
      if (!(zod as { values?: unknown }).values || !noChecks(zod)) return null;
      return `${constant((zod as unknown as { values: Set<unknown> }).values)}.has(${x})`;
    case 'custom': {
      // The schema is its own (only) check: `fn` answering exactly true is zod's pass; any
      // other answer is left to zod (a truthy non-true one passes there too).
      const fn = (def as { fn?: unknown }).fn;
      if (typeof fn !== 'function' || checksOf(schema).length !== 1) return null;
      return `${constant(fn)}(${x}) === true`;
    }
    case 'optional':
    case 'nullable': {
      if (!noChecks(zod) || compileCheck(schema) === null) return null;
      const inner = fastCondition(def.innerType!, x, consts);
      if (inner === null) return null;
      return `(${x} === ${def.type === 'optional' ? 'undefined' : 'null'} || ${inner})`;
    }
    case 'union': {
      if (compileCheck(schema) === null) return null;
      const options = def.options!.map((o) => fastCondition(o, x, consts));
      if (options.some((o) => o === null)) return null;
      return `(${options.join(' || ')})`;
    }
    default:
      return null;
  }
  for (const check of checksOf(schema)) {
    const c = check.def as CheckDef;
    if (c.check === 'min_length' && def.type === 'string') {
      // At least twice the floor in UTF-16 units is at least the floor in code points.
      parts.push(`${x}.length >= ${2 * c.minimum!}`);
    } else if (c.check === 'max_length' && def.type === 'string') {
      parts.push(`${x}.length <= ${c.maximum!}`);
    } else if (c.when) {
      return null;
    } else if (
      c.check === 'string_format' &&
      def.type === 'string' &&
      c.pattern instanceof RegExp &&
      PATTERN_FORMATS.has(c.format ?? '')
    ) {
      const re = constant(c.pattern);
      parts.push(
        c.pattern.global || c.pattern.sticky ? `(${re}.lastIndex = 0, ${re}.test(${x}))` : `${re}.test(${x})`,
      );
    } else if (c.check === 'number_format' && c.format === 'safeint' && def.type === 'number') {
      parts.push(`Number.isSafeInteger(${x})`);
    } else if ((c.check === 'greater_than' || c.check === 'less_than') && typeof c.value === 'number') {
      const op = c.check === 'greater_than' ? (c.inclusive ? '>=' : '>') : c.inclusive ? '<=' : '<';
      parts.push(`${x} ${op} ${constant(c.value)}`);
    } else {
      return null;
    }
  }
  return `(${parts.join(' && ')})`;
}

/**
 * An object's check, generated as one function (as zod's own object parser is) so that every
 * field is a separate, monomorphic site: a field whose value passes its inlined condition costs
 * a few comparisons; any other value is judged by the field's exact check.
 */
function object(def: Internals['def']): Check | null {
  if (def.catchall !== undefined) return null;
  const shape = def.shape!;
  if (Object.getOwnPropertySymbols(shape).length > 0) return null;
  const keys = Object.keys(shape).filter((k) => k !== '__proto__');
  if (keys.some((k) => k in Object.prototype)) return null;
  const exact: Check[] = [];
  const consts: unknown[] = [];
  const lines: string[] = [];
  for (const [i, key] of keys.entries()) {
    const zod = internals(shape[key]!);
    const check = compileCheck(shape[key]!);
    if (!check) return null;
    exact.push(check);
    // zod's object: an optional-in-and-out field may be absent; a required one must be present
    // (even when its schema would accept undefined); anything in between is not compiled.
    let optional: boolean;
    if (zod.optin === undefined) optional = false;
    else if (zod.optout === 'optional') optional = true;
    else return null;
    const k = JSON.stringify(key);
    const fast = fastCondition(shape[key]!, 'x', consts);
    const slow = `r = F[${i}](x); if (r === ${INVALID}) return ${INVALID}; if (r === ${EXTRA}) verdict = ${EXTRA};`;
    // A defined value is present (no shape key is inherited from Object.prototype); only an
    // undefined one needs the second lookup that tells an absent key from an undefined value.
    lines.push(
      `x = v[${k}]; if (x !== undefined || ${k} in v) { present++; ${fast ? `if (!${fast}) { ${slow} }` : slow} }` +
        (optional ? '' : ` else return ${INVALID};`),
    );
  }
  const source = `return function check(v) {
    // zod accepts any non-array object; one with another prototype is left to zod's parse.
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return ${INVALID};
    const proto = Object.getPrototypeOf(v);
    if (proto !== OBJECT && proto !== null) return ${EXTRA};
    let verdict = ${CLEAN}, present = 0, x, r;
    ${lines.join('\n    ')}
    // Keys beyond the shape are stripped by zod: then only its copy is the same value.
    let own = 0;
    for (const _ in v) own++;
    return own === present ? verdict : ${EXTRA};
  }`;
  return new Function('F', 'C', 'OBJECT', source)(exact, consts, Object.prototype) as Check;
}
