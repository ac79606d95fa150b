import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.ts';
import {
  CURRENT_EVENT_VERSION,
  EVENT_VERSIONS,
  VERSION_CHANGES,
  WEBHOOK_PAYLOADS,
  webhookOpenApi,
} from './webhook-schemas.ts';

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

/** Each served `<event>.v<version>`'s shape. */
function servedSchemas(): Record<string, unknown> {
  const { webhooks } = webhookOpenApi() as {
    webhooks: Record<
      string,
      { post: { requestBody: { content: { 'application/json': { schema: unknown } } } } }
    >;
  };
  return Object.fromEntries(
    Object.entries(webhooks).map(([name, op]) => [
      name,
      shapeOf(op.post.requestBody.content['application/json'].schema),
    ]),
  );
}

function servedShapes(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(servedSchemas()).map(([name, shape]) => [
      name,
      createHash('sha256').update(canonicalJson(shape)).digest('hex'),
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

  it('has every version for every event type, so the one a subscription pins covers all its events', () => {
    for (const versions of Object.values(WEBHOOK_PAYLOADS)) {
      expect(Object.keys(versions).map(Number)).toEqual([...EVENT_VERSIONS]);
    }
    expect(CURRENT_EVENT_VERSION).toBe(Math.max(...EVENT_VERSIONS));
    for (const version of EVENT_VERSIONS) expect(VERSION_CHANGES[version]).toBeTruthy();
  });

  it('version 2 is version 1 but for candle_close_time on each scan_digest row', () => {
    type Shape = {
      properties: Record<string, Shape> & { event_version: unknown };
      items?: Shape;
      required?: string[];
    };
    const schemas = servedSchemas() as Record<string, Shape>;
    for (const event of Object.keys(WEBHOOK_PAYLOADS)) {
      const v1 = schemas[`${event}.v1`]!;
      const v2 = structuredClone(schemas[`${event}.v2`]!);
      expect(v2.properties.event_version).toEqual({ type: 'number', const: 2 });
      v2.properties.event_version = v1.properties.event_version;
      if (event === 'scan_digest') {
        const row = v2.properties.data!.properties.calls!.items!;
        expect(row.properties.candle_close_time).toEqual({
          type: 'integer',
          minimum: expect.any(Number),
          maximum: expect.any(Number),
        });
        expect(row.required).toContain('candle_close_time');
        delete (row.properties as Record<string, unknown>).candle_close_time;
        row.required = row.required!.filter((key) => key !== 'candle_close_time');
      }
      expect(v2, event).toEqual(v1);
    }
  });

  it('sees a field added to a version (the words alone do not count)', () => {
    const schema = { type: 'object', properties: { a: { type: 'string', description: 'x' } } };
    const worded = { ...schema, properties: { a: { type: 'string', description: 'other words' } } };
    const added = { ...schema, properties: { ...schema.properties, feed: { enum: ['live', 'replay'] } } };
    expect(canonicalJson(shapeOf(worded))).toBe(canonicalJson(shapeOf(schema)));
    expect(canonicalJson(shapeOf(added))).not.toBe(canonicalJson(shapeOf(schema)));
  });
});
