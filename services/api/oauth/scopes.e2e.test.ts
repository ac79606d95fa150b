import { existsSync } from 'node:fs';
import { auth } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CHROMIUM,
  consentWithKey,
  MemoryHost,
  redirectReceiver,
  signinStage,
} from '../../../test/oauth-host.ts';

/**
 * The scopes a host may ask for: `mcp` (required) and `offline_access`. `openid` is neither
 * advertised nor granted (accounts are API keys, not people: there is no one an ID token could
 * name), so a request naming it, or one without `mcp`, is sent back to the host with
 * invalid_scope before the person is asked to sign in, never into a sign-in that cannot finish.
 */
const present = existsSync(CHROMIUM);

describe.runIf(present || process.env.CI === 'true')('OAuth scopes', () => {
  let base: string;
  let url: URL;
  let key: string;
  let receiver: Awaited<ReturnType<typeof redirectReceiver>>;
  let stage: Awaited<ReturnType<typeof signinStage>>;
  let browser: BrowserContext;

  beforeAll(async () => {
    stage = await signinStage();
    ({ base, url, key, browser } = stage);
    receiver = await redirectReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stage?.close();
  });

  /** The SDK's authorization URL for this scope (undefined: the request names none), with a state. */
  const authorizationUrl = async (scope: string | undefined) => {
    const host = new MemoryHost(receiver.url, 'scope host');
    expect(await auth(host, { serverUrl: url, ...(scope ? { scope } : {}) })).toBe('REDIRECT');
    const to = new URL(host.authorizationUrl!);
    if (scope === undefined) to.searchParams.delete('scope');
    else expect(to.searchParams.get('scope')).toBe(scope);
    to.searchParams.set('state', 'st-123');
    return to;
  };

  /** Where the browser lands on opening the authorization URL (no sign-in done). */
  const landing = async (authorization: URL) => {
    await browser.clearCookies();
    const page = await browser.newPage();
    try {
      await page.goto(authorization.href);
      const landed = new URL(page.url());
      // The receiver's record of that visit, so that a later sign-in waits for its own.
      if (`${landed.origin}${landed.pathname}` === receiver.url) await receiver.next();
      return landed;
    } finally {
      await page.close();
    }
  };

  it('advertises only the scopes it grants: no openid in its metadata', async () => {
    const metadata = (await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json()) as {
      scopes_supported: string[];
    };
    expect(metadata.scopes_supported).not.toContain('openid');
    expect(metadata.scopes_supported).toContain('mcp');
    expect(metadata.scopes_supported).toContain('offline_access');
  });

  it('sends a request for openid, or one without mcp, back to the host with invalid_scope before any sign-in', async () => {
    const refused: [string | undefined, string][] = [
      ['mcp openid', 'openid'],
      ['openid', 'openid'],
      [undefined, 'mcp'],
      ['offline_access', 'mcp'],
    ];
    for (const [scope, named] of refused) {
      const back = await landing(await authorizationUrl(scope));
      expect(`${back.origin}${back.pathname}`, String(scope)).toBe(receiver.url);
      expect(back.searchParams.get('error'), String(scope)).toBe('invalid_scope');
      // The SDK registered with the scope it asks for, registered without openid: the library
      // refuses openid as a scope the client may not ask for, naming it in the scope parameter.
      const told = `${back.searchParams.get('error_description')} (${back.searchParams.get('scope')})`;
      expect(told, String(scope)).toContain(named);
      expect(back.searchParams.get('state'), String(scope)).toBe('st-123');
      expect(back.searchParams.get('iss'), String(scope)).toBe(base);
      expect(back.searchParams.get('code'), String(scope)).toBeNull();
    }
  });

  it('names the scope the host asked for in the refusal, offline_access included (the library drops it before the check)', async () => {
    // The SDK asks for offline_access (it registers with that scope, kept with mcp), and the
    // scopes of each case are put on its authorization URL afterwards; the library keeps
    // offline_access only beside prompt=consent, which the SDK adds to it.
    const told: [string | undefined, string][] = [
      ['offline_access', '(asked: "offline_access")'],
      ['offline_access profile', '(asked: "offline_access profile")'],
      ['profile', '(asked: "profile")'],
      [undefined, '(asked: none)'],
    ];
    for (const [scope, words] of told) {
      const authorization = await authorizationUrl(scope === undefined ? undefined : 'offline_access');
      if (scope !== undefined) authorization.searchParams.set('scope', scope);
      // The SDK adds prompt=consent beside offline_access; hosts that send no prompt are the case.
      authorization.searchParams.delete('prompt');
      const back = await landing(authorization);
      expect(back.searchParams.get('error'), String(scope)).toBe('invalid_scope');
      expect(back.searchParams.get('error_description'), String(scope)).toContain(words);
    }
  });

  it('signs in with mcp and offline_access (an unknown scope beside them ignored), the SDK way, and the token calls a tool', async () => {
    // Registration keeps only listed scopes (RFC 7591): the unknown one is added to the request.
    for (const scope of ['mcp offline_access', 'mcp offline_access calendar.read']) {
      const host = new MemoryHost(receiver.url, 'offline host');
      expect(await auth(host, { serverUrl: url, scope: 'mcp offline_access' })).toBe('REDIRECT');
      host.authorizationUrl!.searchParams.set('scope', scope);
      const returned = receiver.next();
      await consentWithKey(browser, host.authorizationUrl!, key);
      const params = await returned;
      expect(params.get('error'), params.get('error_description') ?? scope).toBeNull();
      expect(await auth(host, { serverUrl: url, authorizationCode: params.get('code')! })).toBe('AUTHORIZED');
      expect(host.saved?.refresh_token, scope).toBeTruthy();
      expect(host.saved?.id_token, scope).toBeUndefined();
      expect(host.saved?.scope, scope).toBe('mcp');
      const client = new Client({ name: 'offline-host', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(url, { authProvider: host }));
      expect((await client.listTools()).tools.length).toBeGreaterThan(0);
      await client.close();
    }
  });

  it('refuses a refresh narrowed to a scope without mcp (invalid_scope), and the refresh token stays good', async () => {
    const host = new MemoryHost(receiver.url, 'narrowing host');
    expect(await auth(host, { serverUrl: url, scope: 'mcp offline_access' })).toBe('REDIRECT');
    const returned = receiver.next();
    await consentWithKey(browser, host.authorizationUrl!, key);
    expect(await auth(host, { serverUrl: url, authorizationCode: (await returned).get('code')! })).toBe(
      'AUTHORIZED',
    );
    const refresh = (scope: string | undefined) =>
      fetch(`${base}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          grant_type: 'refresh_token',
          refresh_token: host.saved!.refresh_token!,
          client_id: host.info!.client_id,
          ...(scope === undefined ? {} : { scope }),
        }),
      }).then(async (res) => ({
        status: res.status,
        body: (await res.json()) as {
          access_token?: string;
          scope?: string;
          error?: string;
          error_description?: string;
        },
      }));
    const narrowed = await refresh('offline_access');
    expect([narrowed.status, narrowed.body.error]).toEqual([400, 'invalid_scope']);
    expect(narrowed.body.error_description).toContain('mcp');
    // Refused before the refresh token was used: it refreshes, narrowed to mcp or not at all.
    for (const scope of ['mcp', undefined]) {
      const served = await refresh(scope);
      expect(served.status, JSON.stringify(served.body)).toBe(200);
      expect(served.body.scope).toBe('mcp');
      host.saved = { ...host.saved!, ...served.body } as typeof host.saved;
    }
    const client = new Client({ name: 'narrowing-host', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(url, { authProvider: host }));
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    await client.close();
  });

  it('registers a client with the scopes it grants only, and says so in the answer (RFC 7591 §3.2.1)', async () => {
    const registered: [string, string][] = [
      ['openid mcp', 'mcp'],
      ['mcp offline_access calendar.read', 'mcp offline_access'],
      ['openid profile email', 'mcp'],
      ['offline_access', 'offline_access mcp'],
    ];
    for (const [asked, kept] of registered) {
      const res = await fetch(`${base}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          redirect_uris: [receiver.url],
          token_endpoint_auth_method: 'none',
          scope: asked,
        }),
      });
      const body = (await res.json()) as {
        scope?: string;
        registration_client_uri: string;
        registration_access_token: string;
      };
      expect(res.status, asked).toBe(201);
      expect(body.scope, asked).toBe(kept);
      // Read back (RFC 7592) as registered, not as asked.
      const read = await fetch(body.registration_client_uri, {
        headers: { authorization: `Bearer ${body.registration_access_token}` },
      });
      expect(((await read.json()) as { scope?: string }).scope, asked).toBe(kept);
    }
    // The SDK registers with the scope it is given and keeps the answer: the registered one.
    const host = new MemoryHost(receiver.url, 'openid host');
    expect(await auth(host, { serverUrl: url, scope: 'openid mcp' })).toBe('REDIRECT');
    expect((host.info as { scope?: string } | undefined)?.scope).toBe('mcp');
  });
});
