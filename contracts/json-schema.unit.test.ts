import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { jsonSchema } from './json-schema.ts';
import { TOOLS } from './tools.ts';

/** Every `type` keyword in a schema, wherever it is. */
function types(node: unknown, found: unknown[] = []): unknown[] {
  if (Array.isArray(node)) for (const item of node) types(item, found);
  else if (node !== null && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === 'type') found.push(value);
      else types(value, found);
    }
  }
  return found;
}

describe('JSON Schema of a contract', () => {
  it('writes a nullable as anyOf of single types, its constraints on the non-null one', () => {
    const schema = jsonSchema(
      z.object({ n: z.number().min(0).nullable().describe('a count'), s: z.string().nullable() }),
      'output',
    );
    expect(schema.properties).toEqual({
      n: { description: 'a count', anyOf: [{ type: 'number', minimum: 0 }, { type: 'null' }] },
      s: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    });
  });

  it('gives every tool’s input and output schema one type per schema', () => {
    for (const [name, tool] of Object.entries(TOOLS)) {
      for (const [io, schema] of [
        ['input', tool.input],
        ['output', tool.output],
      ] as const) {
        const arrays = types(jsonSchema(schema, io)).filter((t) => Array.isArray(t));
        expect(arrays, `${name} ${io}`).toEqual([]);
      }
    }
  });
});
