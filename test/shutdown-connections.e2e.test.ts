import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, describe, expect, it } from 'vitest';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

/** services/main.ts with a 200 s grace: a stop held by a connection outlasts the test's timeout. */
function startWithLongGrace(dataDir: string): ServiceProcess {
  return runServiceProcess({
    DATA_DIR: dataDir,
    REPLAY_SPEED: '0',
    SHUTDOWN_TIMEOUT_MS: '600000',
    REQUEST_TIMEOUT_MS: '600000',
  });
}

async function startedUrl(r: ServiceProcess): Promise<URL> {
  await expect
    .poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100, timeout: 60_000 })
    .toBeTruthy();
  return new URL(r.lines.find((l) => l.msg === 'service started')!.url as string);
}

const GRACE_LINE = 'requests still open after the grace: closing their connections';

/**
 * A stop with a browser beside the service: Chromium opens a connection ahead of the request it
 * may make (a preconnect) and sends nothing on it. Node counts such a connection active from its
 * accept, so neither its idle close nor server.close() ended it, and with a consent page open every
 * SIGTERM waited the whole grace (SHUTDOWN_TIMEOUT_MS / 3) for it. The grace here is 200 s, so a
 * stop held by the connection outlasts the test's own timeout; nothing is timed.
 */
describe('SIGTERM beside connections that carry no request', () => {
  const dirs: string[] = [];
  const running: ServiceProcess[] = [];
  const sockets: Socket[] = [];
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    for (const r of running) if (r.child.exitCode === null) r.child.kill('SIGKILL');
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('closes a connection that sent nothing and an idle keep-alive one, and exits 0 without waiting for the grace', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'shutdown-connections-'));
    dirs.push(dataDir);
    const r = startWithLongGrace(dataDir);
    running.push(r);
    const url = await startedUrl(r);
    const open = (): Promise<{ socket: Socket; closed: Promise<void>; received: () => string }> =>
      new Promise((resolve, reject) => {
        const socket = connect(Number(url.port), url.hostname);
        sockets.push(socket);
        let received = '';
        socket.on('data', (chunk: Buffer) => {
          received += chunk.toString();
        });
        // A reset is as good as a close here: what is checked is that the service ended it.
        socket.on('error', () => undefined);
        const closed = new Promise<void>((done) => socket.once('close', () => done()));
        socket.once('connect', () => resolve({ socket, closed, received: () => received }));
        socket.once('error', reject);
      });

    const preconnect = await open();
    const keepAlive = await open();
    keepAlive.socket.write(`GET /healthz HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`);
    await expect.poll(() => keepAlive.received(), { interval: 50 }).toMatch(/^HTTP\/1\.1 200 /);
    // Accepted by the service (it answered on another connection after this one was made).
    expect((await fetch(`${url.origin}/healthz`)).status).toBe(200);

    r.child.kill('SIGTERM');
    await Promise.all([preconnect.closed, keepAlive.closed]);
    expect(await r.exit).toBe(0);
    const messages = r.lines.map((l) => l.msg);
    expect(messages).toContain('service stopped');
    expect(messages).not.toContain(GRACE_LINE);
    expect(preconnect.received()).toBe('');
  }, 120_000);

  // An MCP host keeps its session's GET event stream open for as long as it runs: the stream
  // never finishes on its own, so it held every stop for the whole grace and was then cut
  // (the SDK client: 'SSE stream disconnected: TypeError: terminated').
  it("ends an open MCP session's GET event stream and exits 0 without waiting for the grace", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'shutdown-connections-'));
    dirs.push(dataDir);
    const r = startWithLongGrace(dataDir);
    running.push(r);
    const url = await startedUrl(r);
    let streamOpen: () => void = () => undefined;
    const streaming = new Promise<void>((resolve) => {
      streamOpen = resolve;
    });
    const transport = new StreamableHTTPClientTransport(new URL('/mcp', url), {
      // The SDK opens the stream on its own after initialize: its answer's headers say it is open.
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (
          (init?.method ?? 'GET') === 'GET' &&
          res.headers.get('content-type')?.startsWith('text/event-stream')
        )
          streamOpen();
        return res;
      },
    });
    const errors: string[] = [];
    transport.onerror = (err) => errors.push(err.message);
    const client = new Client({ name: 'shutdown-test', version: '1.0.0' });
    await client.connect(transport);
    await streaming;

    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
    const messages = r.lines.map((l) => l.msg);
    expect(messages).toContain('service stopped');
    expect(messages).not.toContain(GRACE_LINE);
    expect(errors.filter((m) => m.includes('terminated'))).toEqual([]);
    await client.close();
  }, 120_000);
});
