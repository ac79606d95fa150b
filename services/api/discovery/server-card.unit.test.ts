import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { aiCatalog, registryServerJson, serverCard, signInServerCard } from './catalog.ts';

/**
 * The server cards against the constraints of the server-card extension's schema
 * (modelcontextprotocol/experimental-ext-server-card, schema.json at 8924e08: `$defs.ServerCard`
 * and `$defs.Remote`), restated here: the package is not published, and a host that validates
 * a card with that schema drops one that breaks any of them (a description over 100 characters).
 */
const remote = {
  type: 'object',
  required: ['type', 'url'],
  properties: {
    type: { type: 'string', enum: ['sse', 'streamable-http'] },
    url: { type: 'string', pattern: '^(https?://[^\\s]+|\\{[a-zA-Z_][a-zA-Z0-9_]*\\}[^\\s]*)$' },
    headers: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name'],
        properties: {
          name: { type: 'string' },
          description: { type: 'string' },
          isRequired: { type: 'boolean' },
          isSecret: { type: 'boolean' },
        },
      },
    },
  },
};
const serverCardSchema = {
  type: 'object',
  required: ['$schema', 'description', 'name', 'version'],
  properties: {
    $schema: {
      type: 'string',
      format: 'uri',
      pattern: '^https://static\\.modelcontextprotocol\\.io/schemas/v1/server-card\\.schema\\.json$',
    },
    name: { type: 'string', minLength: 3, maxLength: 200, pattern: '^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$' },
    title: { type: 'string', minLength: 1, maxLength: 100 },
    description: { type: 'string', minLength: 1, maxLength: 100 },
    version: { type: 'string', maxLength: 255 },
    remotes: { type: 'array', items: remote },
  },
};
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
const validCard = ajv.compile(serverCardSchema);

describe('server cards (server-card extension schema)', () => {
  const origin = 'https://signals.example';
  it.each([
    ['/mcp/server-card, sign-in off', serverCard(origin)],
    ['/mcp/server-card, sign-in on', serverCard(origin, true)],
    ['/mcp/signin/server-card', signInServerCard(origin)],
  ])('%s validates', (_name, card) => {
    validCard(card);
    expect(validCard.errors ?? []).toEqual([]);
  });

  it('the AI Catalog lists one entry per card, typed as a server card, with a urn:air identifier', () => {
    const catalog = aiCatalog(origin, 'signals.example', true);
    expect(catalog.specVersion).toBe('1.0');
    expect(catalog.host.displayName).toBeTruthy();
    expect(catalog.entries).toEqual([
      {
        identifier: 'urn:air:signals.example:mcp:signal-service',
        type: 'application/mcp-server-card+json',
        url: `${origin}/mcp/server-card`,
      },
      {
        identifier: 'urn:air:signals.example:mcp:signal-service-signin',
        type: 'application/mcp-server-card+json',
        url: `${origin}/mcp/signin/server-card`,
      },
    ]);
  });

  it('the MCP registry entry lists both remotes, each a valid remote', () => {
    const entry = registryServerJson([]);
    expect(entry.remotes.map((r) => r.url)).toEqual(['https://{host}/mcp', 'https://{host}/mcp/signin']);
    const validRemote = ajv.compile(remote);
    for (const r of entry.remotes) expect(validRemote(r), JSON.stringify(validRemote.errors)).toBe(true);
    expect(entry.description.length).toBeLessThanOrEqual(100);
  });
});
