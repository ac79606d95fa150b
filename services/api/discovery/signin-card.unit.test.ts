import { describe, expect, it } from 'vitest';
import { llmsTxt, mcpCatalog, mcpServerCard, serverCard, signInServerCard } from './catalog.ts';

/** With OAuth sign-in on, every discovery document names /mcp/signin beside /mcp; off, none does. */
describe('discovery documents and the sign-in URL', () => {
  const origin = 'https://signals.example';

  it('the server card names the keyed and the sign-in URLs', () => {
    expect(serverCard(origin, true).remotes.map((r) => r.url)).toEqual([
      `${origin}/mcp`,
      `${origin}/mcp/signin`,
    ]);
    expect(serverCard(origin).remotes.map((r) => r.url)).toEqual([`${origin}/mcp`]);
    expect(signInServerCard(origin).remotes).toEqual([
      { type: 'streamable-http', url: `${origin}/mcp/signin` },
    ]);
  });

  it('/.well-known/mcp.json names the sign-in URL and where its OAuth starts', () => {
    const card = mcpServerCard(origin, [], true);
    expect(card.endpoints.map((e) => e.url)).toEqual([`${origin}/mcp`, `${origin}/mcp/signin`]);
    expect(card.endpoints[1]).toMatchObject({
      transport: 'streamable-http',
      authentication: {
        optional: false,
        schemes: ['oauth2'],
        resource_metadata: `${origin}/.well-known/oauth-protected-resource/mcp/signin`,
      },
    });
    expect(mcpServerCard(origin, []).endpoints).toEqual([
      { transport: 'streamable-http', url: `${origin}/mcp` },
    ]);
  });

  it('the catalog points at both cards', () => {
    expect(mcpCatalog(origin, 'signals.example', true).entries.map((e) => e.url)).toEqual([
      `${origin}/mcp/server-card`,
      `${origin}/mcp/signin/server-card`,
    ]);
    expect(mcpCatalog(origin, 'signals.example').entries).toHaveLength(1);
  });

  it('llms.txt mentions the sign-in endpoint only when it is served', () => {
    expect(llmsTxt(origin, [], [], true)).toContain(`${origin}/mcp/signin`);
    expect(llmsTxt(origin, [], [], false)).not.toContain('/mcp/signin');
  });
});
