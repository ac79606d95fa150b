import { readFile } from 'node:fs/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { validateDiscoveryExtension } from '@x402/extensions/bazaar';
import { PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { catalogTools, registryServerJson } from '../services/api/discovery/catalog.ts';
import { signalToolTable } from '../services/api/mcp/tool-registry.ts';
import { knowledgeTools } from '../services/knowledge/tools.ts';
import { fromBase64Json, startX402Stack, type X402Stack } from './chain/x402-app.ts';

/**
 * An agent with only the origin: it finds every tool, price and rail from /.well-known/*,
 * /llms.txt and each 402, and each document lists exactly what the service serves.
 */

let stack: X402Stack;
let mcpTools: { name: string; title?: string; inputSchema: unknown; outputSchema?: unknown }[];

beforeAll(async () => {
  stack = await startX402Stack();
  const client = new Client({ name: 'discovery', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`)));
  mcpTools = (await client.listTools()).tools;
  await client.close();
});
afterAll(async () => {
  await stack?.stop();
});

interface Manifest {
  x402Version: number;
  resources: {
    resource: string;
    method: string;
    tool: string;
    price: { amount: string };
    priceBy?: { field: string; amounts: Record<string, string> };
    extensions: { bazaar: unknown };
  }[];
  accepts: { network: string; asset: string; payTo: string }[];
  extensions: string[];
  policy: { idempotency: { storedResponseSeconds: number; paymentIdentifierExtension: string } };
  mcp: { url: string; card: string };
}

async function manifest(): Promise<Manifest> {
  const res = await fetch(`${stack.url}/.well-known/x402`);
  expect(res.status).toBe(200);
  return (await res.json()) as Manifest;
}

describe('/.well-known/x402', () => {
  it('lists every paid route the service serves, at the price its 402 quotes, with its rails', async () => {
    const doc = await manifest();
    expect(doc.resources.map((r) => r.tool).sort()).toEqual(mcpTools.map((t) => t.name).sort());
    expect(doc.accepts).toEqual(
      stack.x402.rails.map((r) =>
        expect.objectContaining({ network: r.network, asset: r.asset, payTo: r.payTo }),
      ),
    );
    for (const entry of doc.resources) {
      expect(entry.resource).toBe(`${stack.url}/x402/${entry.tool}`);
      const res = await fetch(entry.resource, {
        method: entry.method,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(signalToolTable().find((t) => t.name === entry.tool)!.example),
      });
      expect(res.status, entry.tool).toBe(402);
      const required = fromBase64Json<{
        accepts: { amount: string; network: string }[];
        extensions: Record<string, unknown>;
      }>(res.headers.get('payment-required'));
      const quoted = entry.priceBy
        ? entry.priceBy.amounts[
            (signalToolTable().find((t) => t.name === entry.tool)!.example as { timeframe: string }).timeframe
          ]
        : entry.price.amount;
      expect(required.accepts.map((a) => a.amount)).toEqual(doc.accepts.map(() => quoted));
      expect(required.accepts.map((a) => a.network)).toEqual(doc.accepts.map((a) => a.network));
      // Every 402 carries the bazaar discovery extension, valid, equal to the manifest's, with
      // what the call answers: the answer's fields and an example that fits them.
      expect(validateDiscoveryExtension(required.extensions.bazaar as never)).toEqual({ valid: true });
      expect(required.extensions.bazaar).toEqual(entry.extensions.bazaar);
      const bazaar = required.extensions.bazaar as {
        info: { output?: { type: string; example: Record<string, unknown> } };
        schema: { properties: { output?: { properties: { example: { required: string[] } } } } };
      };
      expect(
        bazaar.info.output,
        `${entry.tool}: its output example is its recorded 200 answer; record it with RECORD_OPENAPI_EXAMPLES=1 npx vitest run test/openapi-conformance.e2e.test.ts`,
      ).toMatchObject({ type: 'json', example: expect.any(Object) });
      expect(bazaar.schema.properties.output?.properties.example.required, entry.tool).toContain('_service');
      expect(Object.keys(bazaar.info.output!.example)).toEqual(
        expect.arrayContaining(bazaar.schema.properties.output!.properties.example.required),
      );
      // The header rides back in the payer's PAYMENT-SIGNATURE: well inside Node's 16 KB of headers.
      expect(res.headers.get('payment-required')!.length, entry.tool).toBeLessThan(8_192);
      expect(required.extensions[PAYMENT_IDENTIFIER]).toMatchObject({ info: { required: false } });
    }
  });

  it('prices get_trade_call per timeframe as the 402 does, and publishes the policy', async () => {
    const doc = await manifest();
    const trade = doc.resources.find((r) => r.tool === 'get_trade_call')!;
    expect(trade.priceBy).toMatchObject({
      field: 'timeframe',
      amounts: { '1m': '50000', '5m': '30000', '1h': '20000' },
    });
    const res = await fetch(trade.resource, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '1m' }),
    });
    expect(
      fromBase64Json<{ accepts: { amount: string }[] }>(res.headers.get('payment-required')).accepts[0]!
        .amount,
    ).toBe('50000');
    expect(doc.extensions).toEqual([PAYMENT_IDENTIFIER, 'bazaar']);
    expect(doc.policy.idempotency).toMatchObject({
      paymentIdentifierExtension: PAYMENT_IDENTIFIER,
      storedResponseSeconds: 86_400,
    });
    expect(doc.mcp).toEqual({ url: `${stack.url}/mcp`, card: `${stack.url}/.well-known/mcp.json` });
  });
});

describe('/.well-known/mcp.json', () => {
  it('is the server card of exactly the tools tools/list returns, with the same schemas', async () => {
    const res = await fetch(`${stack.url}/.well-known/mcp.json`);
    expect(res.status).toBe(200);
    const card = (await res.json()) as {
      name: string;
      endpoints: { transport: string; url: string }[];
      tools: { name: string; title: string; inputSchema: unknown; outputSchema: unknown }[];
    };
    expect(card.endpoints).toEqual([{ transport: 'streamable-http', url: `${stack.url}/mcp` }]);
    expect(card.tools.map((t) => t.name)).toEqual(mcpTools.map((t) => t.name));
    for (const tool of card.tools) {
      const listed = mcpTools.find((t) => t.name === tool.name)!;
      expect(tool.inputSchema).toEqual(listed.inputSchema);
      expect(tool.outputSchema).toEqual(listed.outputSchema);
      expect(tool.title).toBe(listed.title);
    }
  });
});

describe('/llms.txt', () => {
  it('names every tool once, with its paid route and price, and the discovery documents', async () => {
    const res = await fetch(`${stack.url}/llms.txt`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    expect(text.startsWith('# ')).toBe(true);
    const toolLines = text.split('\n').filter((l) => /^- [a-z_]+: /.test(l));
    expect(toolLines.map((l) => l.slice(2, l.indexOf(':'))).sort()).toEqual(
      mcpTools.map((t) => t.name).sort(),
    );
    // A price set by one argument also names each value priced otherwise (a trade call's short timeframes).
    for (const line of toolLines) {
      expect(line).toMatch(
        /POST http:\/\/127\.0\.0\.1:\d+\/x402\/[a-z_]+, 0\.0\d+ USD per call(; [a-z]+ \w+ 0\.0\d+(, \w+ 0\.0\d+)* USD)?$/,
      );
    }
    expect(toolLines.find((l) => l.startsWith('- get_trade_call:'))).toMatch(
      /USD per call; timeframe 1m 0\.0\d+, 3m 0\.0\d+, 5m 0\.0\d+ USD$/,
    );
    expect(text).toContain(`${stack.url}/.well-known/x402`);
    expect(text).toContain(`${stack.url}/.well-known/mcp.json`);
  });
});

describe('server.json (MCP registry entry, in the repository)', () => {
  it('is what the tool table generates and names the tools the service serves', async () => {
    const file = JSON.parse(await readFile(new URL('../server.json', import.meta.url), 'utf8')) as ReturnType<
      typeof registryServerJson
    >;
    const definitionsOnly = () => Promise.reject(new Error('definitions only'));
    const served = [...signalToolTable(), ...knowledgeTools(definitionsOnly, [])];
    const generated = registryServerJson(catalogTools(served, stack.x402.tools));
    expect(file, 'regenerate with: npx tsx scripts/write-server-json.ts').toEqual(generated);
    expect(file.remotes.map((r) => r.url)).toEqual(['https://{host}/mcp', 'https://{host}/mcp/signin']);
    expect(file.description.length).toBeLessThanOrEqual(100);
    // The harness serves the signal tools; the started service (knowledge e2e) checks all six.
    expect(file._meta['io.modelcontextprotocol.registry/publisher-provided'].tools.sort()).toEqual(
      [...mcpTools.map((t) => t.name), 'chat_knowledge', 'search_knowledge'].sort(),
    );
  });
});

describe('MCP discovery: the catalog and the server card', () => {
  it('the catalog points at the server card, which names the MCP URL the SDK client connects to', async () => {
    const catalogRes = await fetch(`${stack.url}/.well-known/mcp/catalog.json`);
    expect(catalogRes.status).toBe(200);
    expect(catalogRes.headers.get('access-control-allow-origin')).toBe('*');
    const catalog = (await catalogRes.json()) as {
      specVersion: string;
      entries: { identifier: string; displayName: string; type: string; url: string }[];
    };
    expect(catalog.specVersion).toBe('draft');
    expect(catalog.entries).toEqual([
      {
        identifier: 'urn:air:127.0.0.1:signal-service',
        displayName: expect.any(String),
        type: 'application/mcp-server-card+json',
        url: `${stack.url}/mcp/server-card`,
      },
    ]);

    const cardRes = await fetch(catalog.entries[0]!.url, {
      headers: { accept: 'application/mcp-server-card+json' },
    });
    expect(cardRes.status).toBe(200);
    expect(cardRes.headers.get('content-type')).toContain('application/mcp-server-card+json');
    const card = (await cardRes.json()) as {
      name: string;
      version: string;
      remotes: { type: string; url: string }[];
    };
    const serverJson = JSON.parse(await readFile(new URL('../server.json', import.meta.url), 'utf8')) as {
      name: string;
    };
    expect(card.name).toBe(serverJson.name);
    expect(card.remotes).toEqual([
      expect.objectContaining({ type: 'streamable-http', url: `${stack.url}/mcp` }),
    ]);
    // The card's URL is where the official client connects, anonymously.
    const client = new Client({ name: 'card-reader', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(card.remotes[0]!.url)));
    expect(client.getServerVersion()?.version).toBe(card.version);
    await client.close();
  });
});

describe('MCP discovery: the AI Catalog', () => {
  it('answers at /.well-known/ai-catalog.json in its media type, pointing at the card the old catalog names', async () => {
    const res = await fetch(`${stack.url}/.well-known/ai-catalog.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/ai-catalog\+json(;|$)/);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    const catalog = (await res.json()) as {
      specVersion: string;
      entries: { identifier: string; type: string; url: string }[];
    };
    expect(catalog.specVersion).toBe('1.0');
    const old = (await (await fetch(`${stack.url}/.well-known/mcp/catalog.json`)).json()) as {
      entries: { url: string }[];
    };
    expect(catalog.entries.map((e) => e.url)).toEqual(old.entries.map((e) => e.url));
    expect(catalog.entries[0]).toEqual({
      identifier: 'urn:air:127.0.0.1:mcp:signal-service',
      type: 'application/mcp-server-card+json',
      url: `${stack.url}/mcp/server-card`,
    });
    const card = await fetch(catalog.entries[0]!.url, { headers: { accept: catalog.entries[0]!.type } });
    expect(card.status).toBe(200);
  });
});
