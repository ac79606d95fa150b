import { existsSync } from 'node:fs';
import http from 'node:http';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import {
  CHROMIUM,
  consentWithKey,
  launchChromium,
  MemoryHost,
  redirectReceiver,
} from '../../../test/oauth-host.ts';
import { freePort } from '../../../test/ports.ts';

/**
 * On the embedded defaults (no PUBLIC_BASE_URL) the start log names http://127.0.0.1:<port>, and a
 * host may as well use http://localhost:<port>: the official SDK client signs in at either, every
 * document naming the origin it came to (resource, issuer, endpoints), and a token is accepted at
 * the resource it was issued for.
 */
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' };
const present = existsSync(CHROMIUM);
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe.runIf(present || process.env.CI === 'true')(
  'OAuth sign-in at a loopback origin without PUBLIC_BASE_URL',
  () => {
    let server: Server;
    let port: number;
    let key: string;
    let receiver: Awaited<ReturnType<typeof redirectReceiver>>;
    let chromium: Awaited<ReturnType<typeof launchChromium>>;
    let browser: BrowserContext;
    const tokens = new Map<string, string>();

    beforeAll(async () => {
      port = await freePort();
      server = await startKeyedServer({ cache: new MemoryCache(), port, rateLimited: true });
      key = (await server.issue('pro')).key;
      receiver = await redirectReceiver();
      chromium = await launchChromium();
      browser = chromium.browser;
    });
    afterAll(async () => {
      await chromium?.close();
      await receiver?.close();
      await server?.close();
    });

    // First, while no origin has a site yet: more Hosts at other ports than the table holds, as a
    // port forward names them (the outside port is not the one the service listens on).
    it('gives a Host at another port its own issuer, and such Hosts cannot fill the table for good', async () => {
      for (let other = 1; other <= 20; other++) {
        const document = JSON.parse(
          await httpGet(port, '/.well-known/oauth-authorization-server', `127.0.0.1:${other}`),
        ) as { issuer: string };
        expect(document.issuer).toBe(`http://127.0.0.1:${other}`);
      }
      const own = (await (
        await fetch(`http://127.0.0.1:${port}/.well-known/oauth-authorization-server`)
      ).json()) as { issuer: string };
      expect(own.issuer).toBe(`http://127.0.0.1:${port}`);
    });

    for (const hostname of ['127.0.0.1', 'localhost']) {
      it(`signs in at http://${hostname}:<port>/mcp/signin with every document naming that origin`, async () => {
        const base = `http://${hostname}:${port}`;
        const resource = await (
          await fetch(`${base}/.well-known/oauth-protected-resource/mcp/signin`)
        ).json();
        expect(resource).toMatchObject({ resource: `${base}/mcp/signin`, authorization_servers: [base] });
        const as = (await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json()) as Record<
          string,
          string
        >;
        expect(as.issuer).toBe(base);
        for (const endpoint of ['authorization_endpoint', 'token_endpoint', 'registration_endpoint']) {
          expect(as[endpoint]?.startsWith(`${base}/`)).toBe(true);
        }

        const host = new MemoryHost(receiver.url);
        const url = new URL(`${base}/mcp/signin`);
        const first = new Client({ name: 'oauth-host', version: '1.0.0' });
        // Before the change: "Protected resource http://localhost:<port>/mcp/signin does not match expected http://127.0.0.1:<port>/mcp/signin".
        await expect(
          first.connect(new StreamableHTTPClientTransport(url, { authProvider: host })),
        ).rejects.toThrow(UnauthorizedError);
        const returned = receiver.next();
        await consentWithKey(browser, host.authorizationUrl!, key);
        const params = await returned;
        expect(params.get('error')).toBeNull();
        expect(params.get('iss')).toBe(base);
        const transport = new StreamableHTTPClientTransport(url, { authProvider: host });
        await transport.finishAuth(params.get('code')!);
        const client = new Client({ name: 'oauth-host', version: '1.0.0' });
        await client.connect(transport);
        // The sign-in path's instructions name the access token; a key is refused there.
        expect(client.getInstructions()).not.toContain('sk_live');
        expect(client.getInstructions()).toContain('access token');
        const result = await client.callTool({ name: 'get_trade_call', arguments: ARGS });
        expect(result.isError).toBeFalsy();
        expect(result.structuredContent).toMatchObject({
          _service: { auth: { outcome: 'OK', tier: 'pro' } },
        });
        await client.close();
        tokens.set(hostname, host.saved!.access_token);
      });
    }

    it("refuses a token at the other origin's resource (its audience), naming that origin's metadata", async () => {
      const token = tokens.get('127.0.0.1');
      expect(token).toBeTruthy();
      const res = await fetch(`http://localhost:${port}/mcp/signin`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      expect(res.status).toBe(401);
      const challenge = res.headers.get('www-authenticate') ?? '';
      expect(challenge).toContain(
        `resource_metadata="http://localhost:${port}/.well-known/oauth-protected-resource/mcp/signin"`,
      );
      expect(challenge).toContain('another resource');
    });
  },
);

/** The body of a GET sent with the given Host (fetch sets Host from the URL). */
function httpGet(port: number, path: string, host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, headers: { host } }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
      });
      response.on('end', () => resolve(body));
    });
    request.on('error', reject);
  });
}
