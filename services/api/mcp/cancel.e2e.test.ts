import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';
import type { ToolDefinition } from './tool-registry.ts';

/**
 * notifications/cancelled for a tools/call in flight on a session: the call is not counted (it
 * was not debited yet) and is answered -32800; a call nobody cancelled is counted as before.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Answer = {
  error?: { code: number; message: string };
  result?: { structuredContent: { _service: { quota: { used: number } } } };
};

/** A tool that runs until the test lets it finish, saying when it has started. */
function gatedTool() {
  let started!: () => void;
  let finish!: () => void;
  const tool = {
    started: new Promise<void>((resolve) => {
      started = resolve;
    }),
    finish: () => finish(),
    definition: {
      name: 'gated_probe',
      title: 'Gated probe',
      description: 'A test tool that answers once the test lets it.',
      input: z.object({}).strict(),
      run: async () => {
        const released = new Promise<void>((resolve) => {
          finish = resolve;
        });
        started();
        await released;
        return { done: true };
      },
    } satisfies ToolDefinition,
  };
  return tool;
}

describe('a tools/call cancelled by its client', () => {
  let server: Server;
  let key: string;
  let session: string;
  const gate = gatedTool();
  const post = async (body: unknown) =>
    fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${key}`, 'mcp-session-id': session },
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache(), extraTools: [gate.definition] });
    key = (await server.issue('pro')).key;
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${key}` },
      body: JSON.stringify(mcpInitialize('cancel', 0)),
    });
    await init.text();
    session = init.headers.get('mcp-session-id')!;
    await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is answered -32800 and not counted; the next call is the first counted', async () => {
    const pending = post({
      jsonrpc: '2.0',
      id: 'c-1',
      method: 'tools/call',
      params: { name: 'gated_probe', arguments: {} },
    });
    await gate.started;
    const cancel = await post({
      jsonrpc: '2.0',
      method: 'notifications/cancelled',
      params: { requestId: 'c-1', reason: 'the user stopped it' },
    });
    expect(cancel.status).toBe(202);
    gate.finish();
    const answer = (await (await pending).json()) as Answer;
    // Before the change: the result, counted (quota used 1).
    expect(answer.error?.code, JSON.stringify(answer)).toBe(-32800);

    const next = (await (
      await post({
        jsonrpc: '2.0',
        id: 'c-2',
        method: 'tools/call',
        params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
      })
    ).json()) as Answer;
    expect(next.result?.structuredContent._service.quota.used).toBe(1);
  });
});
