import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.ts';
import { webhookOpenApi } from './webhook-schemas.ts';

/**
 * "A receiver never sees its payload change" (services/webhooks/README.md, Versions): a receiver
 * validates against the `<event>.v<version>` schema it downloaded, with additionalProperties false,
 * so a field added to, dropped from or retyped in a published version breaks it. Each published
 * version's shape (its schema without the words: descriptions, titles, examples) is recorded by
 * its hash in webhook-payload-shapes.json; a new version is recorded beside the old ones, never
 * in place of them.
 */
const WORDS = new Set(['description', 'title', 'examples', 'example']);

function shapeOf(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(shapeOf);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .filter(([key]) => !WORDS.has(key))
      .map(([key, inner]) => [key, shapeOf(inner)]),
  );
}

function servedShapes(): Record<string, string> {
  const { webhooks } = webhookOpenApi() as {
    webhooks: Record<
      string,
      { post: { requestBody: { content: { 'application/json': { schema: unknown } } } } }
    >;
  };
  return Object.fromEntries(
    Object.entries(webhooks).map(([name, op]) => [
      name,
      createHash('sha256')
        .update(canonicalJson(shapeOf(op.post.requestBody.content['application/json'].schema)))
        .digest('hex'),
    ]),
  );
}

const recorded = JSON.parse(
  readFileSync(new URL('./webhook-payload-shapes.json', import.meta.url), 'utf8'),
) as Record<string, string>;

describe('published webhook payload versions', () => {
  const served = servedShapes();

  it('keeps every recorded version served, with the shape it was published with', () => {
    for (const [name, hash] of Object.entries(recorded)) {
      expect(
        served[name],
        `${name}: a published payload version changed shape; add a new version instead`,
      ).toBe(hash);
    }
  });

  it('has every served version recorded', () => {
    expect(Object.keys(served).sort()).toEqual(Object.keys(recorded).sort());
  });

  it('sees a field added to a version (the words alone do not count)', () => {
    const schema = { type: 'object', properties: { a: { type: 'string', description: 'x' } } };
    const worded = { ...schema, properties: { a: { type: 'string', description: 'other words' } } };
    const added = { ...schema, properties: { ...schema.properties, feed: { enum: ['live', 'replay'] } } };
    expect(canonicalJson(shapeOf(worded))).toBe(canonicalJson(shapeOf(schema)));
    expect(canonicalJson(shapeOf(added))).not.toBe(canonicalJson(shapeOf(schema)));
  });
});
