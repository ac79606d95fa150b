import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';

/**
 * server.json (the MCP registry entry) against the registry's current published schema, vendored in
 * test/vendor/mcp-registry/ (its README says where it comes from). ajv validates with the schema's
 * own draft-07 rules and formats, as the registry's publisher does before it accepts an entry.
 */

const SCHEMA_FILE = new URL('./vendor/mcp-registry/server.schema.2025-12-11.json', import.meta.url);
const SCHEMA_URL = 'https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json';
const SCHEMA_SHA256 = '3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0';

const schemaBytes = readFileSync(SCHEMA_FILE);
const schema = JSON.parse(schemaBytes.toString('utf8')) as { $id: string };
const serverJson = JSON.parse(readFileSync(new URL('../server.json', import.meta.url), 'utf8')) as Record<
  string,
  unknown
>;

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats.default(ajv);
const validate = ajv.compile(schema);
const errorsOf = (doc: unknown) =>
  validate(doc) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`);

describe('server.json (MCP registry entry)', () => {
  it('names the vendored schema, which is the published file byte for byte', () => {
    expect(createHash('sha256').update(schemaBytes).digest('hex')).toBe(SCHEMA_SHA256);
    expect(schema.$id).toBe(SCHEMA_URL);
    expect(serverJson.$schema).toBe(SCHEMA_URL);
  });

  it('is valid against it', () => {
    expect(errorsOf(serverJson)).toEqual([]);
  });

  it('would be refused for what the registry refuses (the validation can fail)', () => {
    expect(errorsOf({ ...serverJson, name: 'signal-service' })).toContain(
      '/name must match pattern "^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"',
    );
    expect(errorsOf({ ...serverJson, description: 'x'.repeat(101) })).toContain(
      '/description must NOT have more than 100 characters',
    );
    const { version: _, ...unversioned } = serverJson;
    expect(errorsOf(unversioned)).toContain("/ must have required property 'version'");
    expect(
      errorsOf({ ...serverJson, remotes: [{ type: 'streamable-http', url: 'ftp://{host}/mcp' }] }).length,
    ).toBeGreaterThan(0);
  });
});
