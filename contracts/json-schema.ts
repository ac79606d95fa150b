import { z } from 'zod';

/**
 * JSON Schema 2020-12 of a contract (the dialect of MCP tool schemas and OpenAPI 3.1), without
 * the `$schema` key neither wants inline. `input` describes what is accepted (before defaults
 * and transforms), `output` what is produced.
 */
export function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, {
    target: 'draft-2020-12',
    io,
    unrepresentable: 'any',
  }) as Record<string, unknown>;
  return singleTyped(rest) as Record<string, unknown>;
}

/** Keywords that describe a value rather than constrain it: they stay beside the alternatives. */
const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  'deprecated',
  'readOnly',
  'writeOnly',
]);

/**
 * zod writes a nullable number as `type: ["number", "null"]`; dialects with one type per schema
 * (some MCP hosts and model providers; the MCP Inspector warns of it) cannot read that. The same
 * in their form: `anyOf` of one schema per type, the constraints in each non-null one.
 */
function singleTyped(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(singleTyped);
  if (node === null || typeof node !== 'object') return node;
  const walked = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, singleTyped(v)]));
  const { type, ...rest } = walked;
  if (!Array.isArray(type)) return walked;
  const annotations = Object.fromEntries(Object.entries(rest).filter(([k]) => ANNOTATIONS.has(k)));
  const constraints = Object.fromEntries(Object.entries(rest).filter(([k]) => !ANNOTATIONS.has(k)));
  return {
    ...annotations,
    anyOf: (type as string[]).map((t) => (t === 'null' ? { type: 'null' } : { ...constraints, type: t })),
  };
}
