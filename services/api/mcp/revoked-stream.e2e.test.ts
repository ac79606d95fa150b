import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpSessionHeaders } from '../../../test/mcp-wire.ts';
import { startTestService, type TestService } from '../../../test/service-harness.ts';
import { runOperatorCommand } from '../../operator/operator-commands.ts';

/**
 * A key's revocation ends what the key holds on /mcp as soon as the api folds it, without a
 * request of the key: its sessions close and the event stream (GET) each holds ends, whoever
 * recorded the revocation (the operator command in this process, or `npm run keys` in another
 * over the same LMDB log). The session id is then refused as the key is (-32003, 401 on a GET).
 */

type StreamEnd = 'done' | 'error' | 'cancelled';

/**
 * A fetch for the SDK client's transport that passes every request through and keeps each GET
 * (event stream) answer: its status, and how its body ended (the server ending it: 'done').
 */
function watchedFetch() {
  const gets: { status: number; ended: Promise<StreamEnd> }[] = [];
  const waiting: (() => void)[] = [];
  const fetchFn = async (url: string | URL, init?: RequestInit): Promise<Response> => {
    const res = await fetch(url, init);
    if (init?.method !== 'GET') return res;
    let end!: (how: StreamEnd) => void;
    const ended = new Promise<StreamEnd>((resolve) => {
      end = resolve;
    });
    let answer = res;
    if (res.body === null) end('done');
    else {
      const reader = res.body.getReader();
      answer = new Response(
        new ReadableStream<Uint8Array>({
          async pull(controller) {
            try {
              const { done, value } = await reader.read();
              if (done) {
                end('done');
                controller.close();
              } else controller.enqueue(value);
            } catch (err) {
              end('error');
              controller.error(err);
            }
          },
          cancel(reason) {
            end('cancelled');
            return reader.cancel(reason);
          },
        }),
        { status: res.status, statusText: res.statusText, headers: res.headers },
      );
    }
    gets.push({ status: res.status, ended });
    for (const tell of waiting.splice(0)) tell();
    return answer;
  };
  /** The `n`th GET's answer (0: the first), once the client has made it. */
  const get = async (n: number) => {
    while (gets.length <= n) await new Promise<void>((resolve) => waiting.push(resolve));
    return gets[n]!;
  };
  return { fetch: fetchFn, get };
}

/** The official client on `key`, its GET stream watched; reconnecting once, at once, when the stream ends. */
async function connected(url: string, key: string) {
  const watched = watchedFetch();
  const client = new Client({ name: 'revoked-stream', version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
    fetch: watched.fetch,
    reconnectionOptions: {
      initialReconnectionDelay: 1,
      maxReconnectionDelay: 1,
      reconnectionDelayGrowFactor: 1,
      maxRetries: 1,
    },
  });
  // The reconnection's refusal comes back here: expected, checked through the watched GETs.
  client.onerror = () => undefined;
  await client.connect(transport);
  // The client opens the session's event stream after initialize, by itself.
  const stream = await watched.get(0);
  expect(stream.status).toBe(200);
  return { client, transport, watched, stream, session: transport.sessionId! };
}

/** What a request with another live key on `session` is told: a closed session is simply not found. */
async function askedByAnother(url: string, session: string, key: string): Promise<string> {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...mcpSessionHeaders(session), authorization: `Bearer ${key}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
  });
  expect(res.status).toBe(404);
  return ((await res.json()) as { error: { message: string } }).error.message;
}

describe('a key revoked while its MCP session holds the event stream', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('ends the stream and closes the session at the revocation, the key sending nothing', async () => {
    const issued = await server.issue('pro', 'revoked-while-streaming');
    const other = await server.issue('pro', 'bystander');
    const { client, watched, stream, session } = await connected(server.url, issued.key);
    try {
      // Open and the key's own: another key is told the session is another credential's.
      expect(await askedByAnother(server.url, session, other.key)).toMatch(/another credential/);

      // Revoked as an operator revokes it (`npm run keys -- revoke`), against the server's log.
      const said = await runOperatorCommand(['revoke', issued.keyId, '--reason', 'leaked'], {
        store: server.store,
        cache: new MemoryCache(),
      });
      expect(said).toBe(`${issued.keyId}: revoked (leaked)`);

      // The server ended the stream: the client sent no request after the revocation.
      expect(await stream.ended).toBe('done');
      // The session is closed, not only its stream: no session of that id is open.
      expect(await askedByAnother(server.url, session, other.key)).toBe('Session not found');
      // The client's own reconnection of the stream is refused as the key is (401, -32003).
      const again = await watched.get(1);
      expect(again.status).toBe(401);
      const refused = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...mcpSessionHeaders(session), authorization: `Bearer ${issued.key}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 'after', method: 'tools/list' }),
      });
      expect(refused.status).toBe(200);
      expect(await refused.json()).toMatchObject({
        id: 'after',
        error: { code: -32003, data: { code: 'unknown_key', retryable: false } },
      });
    } finally {
      await client.close();
    }
  }, 30_000);

  it("leaves another key's session and stream open", async () => {
    const revoked = await server.issue('pro', 'revoked-beside');
    const kept = await server.issue('pro', 'kept');
    const gone = await connected(server.url, revoked.key);
    const stays = await connected(server.url, kept.key);
    try {
      await runOperatorCommand(['revoke', revoked.keyId], { store: server.store, cache: new MemoryCache() });
      expect(await gone.stream.ended).toBe('done');
      // The other key's session answers on it, its stream still open: ended only by the client's
      // own close (an abort, read as an error), never by the server.
      expect(await stays.client.ping()).toEqual({});
      expect(await Promise.race([stays.stream.ended, Promise.resolve('open')])).toBe('open');
      await stays.client.close();
      expect(await stays.stream.ended).not.toBe('done');
    } finally {
      await gone.client.close();
      await stays.client.close();
    }
  }, 30_000);
});

const exec = promisify(execFile);
const ROOT = new URL('../../../', import.meta.url).pathname;
const KEYS_CLI = ['--import', 'tsx', join(ROOT, 'services/operator/cli.ts')];

describe('a key revoked by `npm run keys` in another process over the same LMDB log', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mcp-revoked-'));
  let running: TestService;
  beforeAll(async () => {
    running = await startTestService(['api'], { DATA_DIR: dir });
  }, 60_000);
  afterAll(async () => {
    await running?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("ends the key's event stream in the api as it folds the revocation", async () => {
    const url = running.service.url;
    const created = await exec(process.execPath, [...KEYS_CLI, 'create', '--plan', 'pro', '--owner', 'ops'], {
      cwd: ROOT,
      env: { ...process.env, EVENT_STORE: 'lmdb', DATA_DIR: dir, PUBLIC_BASE_URL: url },
    });
    const key = /key: +(\S+)/.exec(created.stdout)![1]!;
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    const { client, stream } = await connected(url, key);
    try {
      const revoked = exec(process.execPath, [...KEYS_CLI, 'revoke', keyId], {
        cwd: ROOT,
        env: { ...process.env, EVENT_STORE: 'lmdb', DATA_DIR: dir, PUBLIC_BASE_URL: url },
      });
      expect(await stream.ended).toBe('done');
      expect((await revoked).stdout).toContain(`${keyId}: revoked (`);
    } finally {
      await client.close();
    }
  }, 60_000);
});
