import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';
import type { ToolDefinition } from './tool-registry.ts';

/**
 * notifications/cancelled for a tools/call in flight on a session: the call is not counted (it
 * was not debited yet), not run if it had not started, and is answered -32800; a call nobody
 * cancelled is counted as before, a later one reusing a cancelled call's id too.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Answer = {
  error?: { code: number; message: string };
  result?: { structuredContent: { _service: { quota: { used: number } } } };
};

/**
 * A cache whose quota reads wait, while held, until the test lets them go: a call is then in
 * flight on its session but not yet run (serveMetered reads the quota before the run).
 */
class HeldReadsCache extends MemoryCache {
  private held: Promise<void> | null = null;
  private letGo = () => {};
  private reading = () => {};
  /** Holds the next quota reads; resolves once one is waiting. */
  hold(): Promise<void> {
    this.held = new Promise<void>((resolve) => {
      this.letGo = resolve;
    });
    return new Promise<void>((resolve) => {
      this.reading = resolve;
    });
  }
  release(): void {
    this.held = null;
    this.letGo();
  }
  override async readLive(family: string, keys: string[]): Promise<number[]> {
    if (this.held !== null) {
      this.reading();
      await this.held;
    }
    return super.readLive(family, keys);
  }
}

/** A tool that counts its runs. */
function countedTool() {
  const tool = {
    runs: 0,
    definition: {
      name: 'counted_probe',
      title: 'Counted probe',
      description: 'A test tool that counts its runs.',
      input: z.object({}).strict(),
      run: async () => {
        tool.runs++;
        return { done: true };
      },
    } satisfies ToolDefinition,
  };
  return tool;
}

/** A tool that runs until the test lets it finish, saying when it has started (once). */
function gatedTool(name = 'gated_probe') {
  let started!: () => void;
  let finish!: () => void;
  const tool = {
    started: new Promise<void>((resolve) => {
      started = resolve;
    }),
    finish: () => finish(),
    definition: {
      name,
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
  const sdkGate = gatedTool('gated_sdk_probe');
  const counted = countedTool();
  const cache = new HeldReadsCache();
  const postAs = async (as: { key: string; session: string }, body: unknown) =>
    fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${as.key}`, 'mcp-session-id': as.session },
      body: JSON.stringify(body),
    });
  const post = (body: unknown) => postAs({ key, session }, body);
  const openSession = async (key: string): Promise<string> => {
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${key}` },
      body: JSON.stringify(mcpInitialize('cancel', 0)),
    });
    await init.text();
    const session = init.headers.get('mcp-session-id')!;
    await postAs({ key, session }, { jsonrpc: '2.0', method: 'notifications/initialized' });
    return session;
  };

  beforeAll(async () => {
    server = await startKeyedServer({
      cache,
      extraTools: [gate.definition, sdkGate.definition, counted.definition],
    });
    key = (await server.issue('pro')).key;
    session = await openSession(key);
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
    // The call was cancelled while it ran: its result is thrown away, not debited.
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

  it('a cancelled call the SDK answers leaves no mark: a later plain call reusing its id runs', async () => {
    // A progressToken makes the SDK transport answer the call (not session-call.ts); cancelled,
    // the SDK sends no answer, and the client drops the request.
    const dropped = new AbortController();
    const pending = fetch(`${server.url}/mcp`, {
      method: 'POST',
      signal: dropped.signal,
      headers: { ...MCP_HEADERS, authorization: `Bearer ${key}`, 'mcp-session-id': session },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 'r-1',
        method: 'tools/call',
        params: { name: 'gated_sdk_probe', arguments: {}, _meta: { progressToken: 'p-1' } },
      }),
    }).catch(() => undefined);
    await sdkGate.started;
    const cancel = await post({
      jsonrpc: '2.0',
      method: 'notifications/cancelled',
      params: { requestId: 'r-1' },
    });
    expect(cancel.status).toBe(202);
    sdkGate.finish();
    dropped.abort();
    await pending;

    // The id is free once the server has seen the request closed (409 until then). The call
    // reusing it was never cancelled: it runs and is answered, not -32800 by a mark the
    // cancelled call left behind.
    const reuse = async () => {
      const res = await post({
        jsonrpc: '2.0',
        id: 'r-1',
        method: 'tools/call',
        params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
      });
      return { status: res.status, answer: (await res.json()) as Answer };
    };
    let reused = await reuse();
    for (let tries = 0; reused.status === 409 && tries < 50; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      reused = await reuse();
    }
    expect(reused.answer.error, JSON.stringify(reused.answer)).toBeUndefined();
    expect(reused.answer.result?.structuredContent._service.quota.used).toBeGreaterThan(0);
  });

  it('cancelled before it runs: not run, not debited', async () => {
    // A key of its own: no quota lease yet, so the call reads the quota from the cache.
    const as = { key: (await server.issue('pro')).key, session: '' };
    as.session = await openSession(as.key);
    const reading = cache.hold();
    const pending = postAs(as, {
      jsonrpc: '2.0',
      id: 'b-1',
      method: 'tools/call',
      params: { name: 'counted_probe', arguments: {} },
    });
    await reading;
    const cancel = await postAs(as, {
      jsonrpc: '2.0',
      method: 'notifications/cancelled',
      params: { requestId: 'b-1' },
    });
    expect(cancel.status).toBe(202);
    cache.release();
    const answer = (await (await pending).json()) as Answer;
    expect(answer.error?.code, JSON.stringify(answer)).toBe(-32800);
    expect(counted.runs).toBe(0);

    const next = (await (
      await postAs(as, {
        jsonrpc: '2.0',
        id: 'b-2',
        method: 'tools/call',
        params: { name: 'counted_probe', arguments: {} },
      })
    ).json()) as Answer;
    expect(counted.runs).toBe(1);
    expect(next.result?.structuredContent._service.quota.used).toBe(1);
  });
});
