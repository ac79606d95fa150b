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
  return rest;
}
