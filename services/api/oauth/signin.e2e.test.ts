import { existsSync } from 'node:fs';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { BrowserContext } from 'playwright-core';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { axeViolations } from '../../../test/axe.ts';
import type { startKeyedServer } from '../../../test/keyed-harness.ts';
import {
  CHROMIUM,
  consentWithKey,
  consentWithWallet,
  MemoryHost,
  redirectReceiver,
  signinStage,
} from '../../../test/oauth-host.ts';
import { issueKey } from '../../keys/key-commands.ts';

/**
 * An MCP host signs in the way Claude or ChatGPT does: the official SDK client meets a 401 on
 * /mcp/signin, discovers the protected resource and authorization server metadata, registers
 * itself (RFC 7591), sends the person to the authorization URL with PKCE, and, once the person
 * has signed in with their API key in (headless) Chromium, exchanges the code and calls a tool
 * as that key: same plan, same quota, metered exactly like the key's own Bearer call.
 */
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' };
const present = existsSync(CHROMIUM);

type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Structured = { _service: { auth: { outcome: string; tier: string }; quota: { used: number } } };

describe.runIf(present || process.env.CI === 'true')('OAuth sign-in with the official MCP SDK client', () => {
  let server: Server;
  let base: string;
  let key: string;
  let receiver: Awaited<ReturnType<typeof redirectReceiver>>;
  let stage: Awaited<ReturnType<typeof signinStage>>;
  let browser: BrowserContext;

  beforeAll(async () => {
    stage = await signinStage({ rateLimited: true });
    ({ server, base, key, browser } = stage);
    receiver = await redirectReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stage?.close();
  });

  it('a key not accepted marks the key field invalid, described by the refusal; no console error', async () => {
    const host = new MemoryHost(receiver.url);
    const url = new URL(`${base}/mcp/signin`);
    const client = new Client({ name: 'oauth-host', version: '1.0.0' });
    await expect(
      client.connect(new StreamableHTTPClientTransport(url, { authProvider: host })),
    ).rejects.toThrow(UnauthorizedError);
    await browser.clearCookies();
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('response', (r) => {
      if (r.status() >= 400 && r.request().resourceType() !== 'document')
        problems.push(`${r.status()} ${r.url()}`);
    });
    try {
      await page.goto(String(host.authorizationUrl!));
      expect(await page.locator('#wallet-status').getAttribute('role')).toBe('status');
      expect(await page.locator('#api_key').getAttribute('aria-invalid')).toBeNull();
      // axe-core (WCAG 2.2 A/AA and best practice): nothing on the sign-in page (it had no main landmark).
      expect(await axeViolations(page)).toEqual([]);
      expect(await page.title()).toBe('Sign in — allow an MCP host');
      await page.fill('#api_key', 'sk_live_not-a-key-of-this-service');
      await page.click('#allow');
      await page.locator('#consent-error').waitFor();
      const field = page.locator('#api_key');
      expect(await field.getAttribute('aria-invalid')).toBe('true');
      expect(await field.getAttribute('aria-describedby')).toBe('consent-error');
      expect(await page.locator('#consent-error').textContent()).toBe(
        'This is not an API key of this service.',
      );
      // The refusal comes on a new page, where role=alert is not announced: the title read on load
      // says it, and the focus starts on the field refused (read with the refusal describing it).
      expect(await page.title()).toBe('Error: Sign in — allow an MCP host');
      expect(await page.evaluate('document.activeElement.id')).toBe('api_key');
      expect(await axeViolations(page)).toEqual([]);
      // The page's own 401 aside, nothing failed: no /favicon.ico asked for and refused.
      expect(problems.filter((p) => !p.includes('401'))).toEqual([]);
    } finally {
      await page.close();
    }
  });

  it('sends a strict Content-Security-Policy with the sign-in page and the error pages; Chromium reports no violation', async () => {
    const host = new MemoryHost(receiver.url);
    await expect(
      new Client({ name: 'oauth-host', version: '1.0.0' }).connect(
        new StreamableHTTPClientTransport(new URL(`${base}/mcp/signin`), { authProvider: host }),
      ),
    ).rejects.toThrow(UnauthorizedError);
    await browser.clearCookies();
    const page = await browser.newPage();
    await page.addInitScript(`window.ethereum = { request: async ({ method }) => {
      if (method === 'eth_requestAccounts') return ['0x0000000000000000000000000000000000000001'];
      if (method === 'eth_chainId') return '0x1';
      throw new Error('signing declined');
    } };`);
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    try {
      const signin = page.waitForResponse((r) => r.url().includes('/oauth/interaction/'));
      await page.goto(String(host.authorizationUrl!));
      const headers = (await signin).headers();
      const policy = headers['content-security-policy']!;
      expect(policy).toMatch(/^default-src 'none'; script-src 'sha256-[^ ;]+'; style-src 'sha256-[^ ;]+';/);
      expect(policy).toContain("connect-src 'self'");
      // Its forms post here; the last is redirected to the host's redirect_uri, which is allowed too.
      expect(policy).toContain(`form-action 'self' ${new URL(receiver.url).origin};`);
      expect(policy).toContain("frame-ancestors 'none'");
      expect(policy).not.toContain('unsafe-inline');
      expect(headers).toMatchObject({ 'x-frame-options': 'DENY', 'cache-control': 'no-store' });
      // The wallet script runs under the policy and its nonce fetch is allowed: it gets as far as
      // the signature, which this stand-in wallet declines.
      await page.click('#wallet-button');
      await expect.poll(() => page.locator('#wallet-status').textContent()).toBe('signing declined');
      expect(await axeViolations(page)).toEqual([]);
      // An error page of the flow (an interaction that is gone), as a person meets it.
      await page.goto(`${base}/oauth/interaction/not-an-interaction`);
      expect(await page.locator('main h1').count()).toBe(1);
      expect(await axeViolations(page)).toEqual([]);
      expect(problems.filter((p) => !p.includes('400'))).toEqual([]);
    } finally {
      await page.close();
    }
    // Error pages: an interaction that is gone (ours) and a request the library refuses (rendered by ours).
    for (const url of [
      `${base}/oauth/interaction/not-an-interaction`,
      `${base}/oauth/authorize?client_id=not-a-client&response_type=code`,
    ]) {
      const res = await fetch(url);
      expect([url, res.status]).toEqual([url, 400]);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('content-security-policy')).toMatch(
        /^default-src 'none'; style-src 'sha256-[^ ;]+'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'$/,
      );
    }
  });

  it('signs in through the consent page and calls tools as the chosen key', async () => {
    const host = new MemoryHost(receiver.url);
    const url = new URL(`${base}/mcp/signin`);
    const first = new Client({ name: 'oauth-host', version: '1.0.0' });
    await expect(
      first.connect(new StreamableHTTPClientTransport(url, { authProvider: host })),
    ).rejects.toThrow(UnauthorizedError);
    // Dynamic registration happened (the SDK falls back to it: its metadata URL is not set).
    expect(host.info?.client_id).toBeTruthy();
    const authorizationUrl = host.authorizationUrl!;
    expect(authorizationUrl.searchParams.get('code_challenge_method')).toBe('S256');
    expect(authorizationUrl.searchParams.get('resource')).toBe(url.href);

    const returned = receiver.next();
    await consentWithKey(browser, authorizationUrl, key);
    const params = await returned;
    expect(params.get('error')).toBeNull();
    const code = params.get('code')!;

    const transport = new StreamableHTTPClientTransport(url, { authProvider: host });
    await transport.finishAuth(code);
    expect(host.saved?.access_token).toBeTruthy();
    expect(host.saved?.refresh_token).toBeTruthy();
    expect(host.saved?.expires_in).toBeLessThanOrEqual(600);

    const client = new Client({ name: 'oauth-host', version: '1.0.0' });
    await client.connect(transport);
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toContain('get_trade_call');
    const result = await client.callTool({ name: 'get_trade_call', arguments: ARGS });
    const signedIn = result.structuredContent as Structured;
    expect(signedIn._service.auth).toMatchObject({ outcome: 'OK', tier: 'pro' });
    expect(signedIn._service.quota.used).toBe(1);
    await client.close();

    // The key's own Bearer call on /mcp counts against the same quota, right after.
    const keyed = new Client({ name: 'keyed', version: '1.0.0' });
    await keyed.connect(
      new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    const viaKey = (await keyed.callTool({ name: 'get_trade_call', arguments: ARGS }))
      .structuredContent as Structured;
    expect(viaKey._service.auth).toMatchObject({ outcome: 'OK', tier: 'pro' });
    expect(viaKey._service.quota.used).toBe(2);
    await keyed.close();

    // The refresh token renews the access token (the SDK's auth() does it when asked again).
    const before = host.saved!.access_token;
    expect(await auth(host, { serverUrl: url })).toBe('AUTHORIZED');
    expect(host.saved!.access_token).not.toBe(before);
    const renewed = new Client({ name: 'oauth-host', version: '1.0.0' });
    await renewed.connect(new StreamableHTTPClientTransport(url, { authProvider: host }));
    const again = (await renewed.callTool({ name: 'get_trade_call', arguments: ARGS }))
      .structuredContent as Structured;
    expect(again._service.quota.used).toBe(3);
    await renewed.close();

    // A one-shot call without a session (the path that skips the SDK transport) acts as the key too.
    const oneShot = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${host.saved!.access_token}`,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: 'get_trade_call', arguments: ARGS },
      }),
    });
    expect(oneShot.status).toBe(200);
    const body = (await oneShot.json()) as { result: { structuredContent: Structured } };
    expect(body.result.structuredContent._service.auth).toMatchObject({ outcome: 'OK', tier: 'pro' });
    expect(body.result.structuredContent._service.quota.used).toBe(4);
  });

  it('signs in with a wallet (EIP-4361) and acts as the key the person picks', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    // The wallet holds two keys: its free one and a starter key an operator issued to it.
    const starter = await issueKey(server.store, {
      plan: 'starter',
      owner: account.address,
      via: 'operator',
    });
    const free = await issueKey(server.store, {
      plan: 'free',
      owner: account.address,
      via: 'siwe',
      stream: `wallet-${account.address.toLowerCase()}`,
    });
    await server.channel.registry.waitFor(Math.max(starter.position, free.position));

    const host = new MemoryHost(receiver.url, 'wallet host');
    const url = new URL(`${base}/mcp/signin`);
    await expect(
      new Client({ name: 'wallet-host', version: '1.0.0' }).connect(
        new StreamableHTTPClientTransport(url, { authProvider: host }),
      ),
    ).rejects.toThrow(UnauthorizedError);
    const returned = receiver.next();
    await consentWithWallet(
      browser,
      host.authorizationUrl!,
      { address: account.address, sign: (message) => account.signMessage({ message }) },
      starter.keyId,
      // The key choice: a radio group in a fieldset named by its legend; axe finds nothing.
      async (page) => {
        expect(await page.getByRole('group', { name: 'Choose the key the host will act as' }).count()).toBe(
          1,
        );
        expect(await page.getByRole('radio').count()).toBe(2);
        expect(await axeViolations(page)).toEqual([]);
      },
    );
    const code = (await returned).get('code')!;
    const transport = new StreamableHTTPClientTransport(url, { authProvider: host });
    await transport.finishAuth(code);
    const client = new Client({ name: 'wallet-host', version: '1.0.0' });
    await client.connect(transport);
    const result = (await client.callTool({ name: 'get_trade_call', arguments: ARGS }))
      .structuredContent as Structured;
    expect(result._service.auth).toMatchObject({ outcome: 'OK', tier: 'starter' });
    await client.close();
  });

  it('keeps /mcp open to anonymous callers while /mcp/signin answers 401 with its resource metadata', async () => {
    const anonymous = new Client({ name: 'anon', version: '1.0.0' });
    await anonymous.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    const free = (await anonymous.callTool({ name: 'get_trade_call', arguments: ARGS }))
      .structuredContent as Structured;
    expect(free._service.auth).toMatchObject({ outcome: 'ABSENT', tier: 'free' });
    await anonymous.close();

    const refused = await fetch(`${base}/mcp/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/signin", scope="mcp"`,
    );
    // Refused before the body is read (README, MCP): a JSON-RPC error whose id is null, not the request's.
    expect(await refused.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32000 }, id: null });
    // An API key is not an access token: /mcp/signin takes OAuth tokens only.
    const withKey = await fetch(`${base}/mcp/signin`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${key}`,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(withKey.status).toBe(401);
    expect(withKey.headers.get('www-authenticate')).toContain('error="invalid_token"');
    expect(withKey.headers.get('www-authenticate')).toContain('error_description="');
    expect(await withKey.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32000 }, id: null });

    const metadata = await (await fetch(`${base}/.well-known/oauth-protected-resource/mcp/signin`)).json();
    expect(metadata).toEqual({
      resource: `${base}/mcp/signin`,
      authorization_servers: [base],
      scopes_supported: ['mcp'],
      bearer_methods_supported: ['header'],
      resource_name: expect.any(String),
    });
    const server8414 = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json();
    expect(server8414).toMatchObject({
      issuer: base,
      code_challenge_methods_supported: ['S256'],
      response_types_supported: ['code'],
      registration_endpoint: `${base}/oauth/register`,
      client_id_metadata_document_supported: true,
    });
  });
});
