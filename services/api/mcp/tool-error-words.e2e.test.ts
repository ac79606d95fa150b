import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * A tool error's structuredContent carries its words (`error`, the text content's message), as
 * the quota's refusal does: a host that hands the model structuredContent rather than the text
 * (both are the result) reads why the call failed and what to send instead, not a bare code.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe('MCP tool errors: the words ride in structuredContent', () => {
  let server: Server;
  let client: Client;

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    const { key } = await server.issue('pro');
    client = new Client({ name: 'words', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
  });
  afterAll(async () => {
    await client?.close();
    await server?.close();
  });

  const CASES: [string, string, Record<string, unknown>, string][] = [
    ['a coin the venue does not list', 'get_trade_call', { coin: 'NOPE' }, 'unknown_coin'],
    ['invalid arguments', 'get_market_regime', { coin: 5 }, 'invalid_arguments'],
    ['an unknown tool', 'no_such_tool', {}, 'unknown_tool'],
  ];

  it.each(CASES)('%s', async (_label, name, args, code) => {
    const result = await client.callTool({ name, arguments: args });
    expect(result.isError).toBe(true);
    const text = (result.content as { type: string; text: string }[])[0]!.text;
    const structured = result.structuredContent as { code: string; error?: string };
    expect(structured.code).toBe(code);
    expect(structured.error).toBe(text);
  });
});
