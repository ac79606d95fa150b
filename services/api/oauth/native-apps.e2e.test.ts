import { existsSync } from 'node:fs';
import { auth } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientMetadata } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, MemoryHost, signinStage } from '../../../test/oauth-host.ts';

/**
 * Native apps (RFC 8252): Cursor desktop registers its app's own scheme beside an https and a
 * loopback callback, in one request. The client is then native: each of its redirect URIs is
 * served (a loopback one on any port, RFC 8252 §7.3), PKCE S256 stays required, and schemes that
 * are no app's (javascript:, data:, file:, ...) stay refused at registration.
 */
const present = existsSync(CHROMIUM);

/** The three callbacks Cursor desktop registers together (cursor.com/docs/mcp). */
const CURSOR_APP = 'cursor://anysphere.cursor-mcp/oauth/callback';
const CURSOR_WEB = 'https://www.cursor.com/agents/mcp/oauth/callback';
const CURSOR_LOOPBACK = 'http://localhost:8787/callback';
const CURSOR_URIS = [CURSOR_APP, CURSOR_WEB, CURSOR_LOOPBACK];

/** The SDK's client provider, registering all three callbacks and sending the person back to one. */
class CursorHost extends MemoryHost {
  constructor(private readonly returnTo: string) {
    super(returnTo, 'Cursor');
  }
  override get clientMetadata(): OAuthClientMetadata {
    return { ...super.clientMetadata, redirect_uris: [...CURSOR_URIS] };
  }
  override get redirectUrl() {
    return this.returnTo;
  }
}

describe.runIf(present || process.env.CI === 'true')('OAuth sign-in from native apps (Cursor)', () => {
  let base: string;
  let url: URL;
  let key: string;
  let stage: Awaited<ReturnType<typeof signinStage>>;
  let browser: BrowserContext;

  beforeAll(async () => {
    stage = await signinStage();
    ({ base, url, key, browser } = stage);
  });
  afterAll(async () => {
    await stage?.close();
  });

  const register = (metadata: Record<string, unknown>) =>
    fetch(`${base}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(metadata),
    });

  /**
   * What the person does on the consent page (sign in with the key, allow), and where the server
   * then sends the browser: the Location of the authorization's last redirect. The browser's
   * redirects are made here without following them (a route sees only a redirect's first request),
   * with the browser's cookies, so none is followed into the app's scheme or out to the host
   * (www.cursor.com, a loopback port no one listens on).
   */
  const consentLocation = async (authorization: URL, returnTo: string) => {
    await browser.clearCookies();
    const page = await browser.newPage();
    try {
      let resolveBack: (location: string) => void = () => {};
      let rejectBack: (err: Error) => void = () => {};
      const back = new Promise<string>((resolve, reject) => {
        resolveBack = resolve;
        rejectBack = reject;
      });
      back.catch(() => {}); // awaited below, once the page has been used
      await page.route(
        (to) => to.origin === base && to.pathname.startsWith('/oauth/interaction/'),
        async (route) => {
          if (route.request().method() !== 'POST') return route.continue();
          let response = await route.fetch({ maxRedirects: 0 });
          let location = response.headers().location ?? '';
          for (let hop = 0; hop < 5 && location && new URL(location, base).origin === base; hop++) {
            response = await page.request.get(new URL(location, base).href, { maxRedirects: 0 });
            location = response.headers().location ?? '';
          }
          await route.abort('aborted'); // the page stays; the host would take it from here
          if (location.startsWith(returnTo)) resolveBack(location);
          else rejectBack(new Error(`sent to ${location || 'nowhere'} (${response.status()})`));
        },
      );
      await page.goto(authorization.href);
      const shown = await page.textContent('body');
      await page.fill('#api_key', key);
      await page.click('#allow');
      return { location: await back, shown: shown ?? '' };
    } finally {
      await page.close();
    }
  };

  it("registers Cursor's three callbacks in one request (201), as a native app", async () => {
    const res = await register({
      client_name: 'Cursor',
      redirect_uris: CURSOR_URIS,
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
    const body = (await res.json()) as Record<string, unknown>;
    expect(res.status, JSON.stringify(body)).toBe(201);
    expect(body.redirect_uris).toEqual(CURSOR_URIS);
    expect(body.application_type).toBe('native');
  });

  it('signs in to cursor://: the code and state come back on the app scheme, the SDK exchanges it with its verifier and calls a tool', async () => {
    const host = new CursorHost(CURSOR_APP);
    expect(await auth(host, { serverUrl: url, scope: 'mcp' })).toBe('REDIRECT');
    const authorization = host.authorizationUrl!;
    expect(authorization.searchParams.get('redirect_uri')).toBe(CURSOR_APP);
    expect(authorization.searchParams.get('code_challenge_method')).toBe('S256');
    authorization.searchParams.set('state', 'cursor-state');
    const { location, shown } = await consentLocation(authorization, CURSOR_APP);
    // The page names the app the code goes to by its scheme.
    expect(shown).toContain('cursor://anysphere.cursor-mcp');
    expect(location.startsWith(`${CURSOR_APP}?`)).toBe(true);
    const params = new URL(location).searchParams;
    expect(params.get('error'), params.get('error_description') ?? '').toBeNull();
    expect(params.get('state')).toBe('cursor-state');
    expect(params.get('iss')).toBe(base);
    const code = params.get('code');
    expect(code).toBeTruthy();
    expect(await auth(host, { serverUrl: url, authorizationCode: code! })).toBe('AUTHORIZED');
    expect(host.saved?.access_token).toBeTruthy();
    const client = new Client({ name: 'cursor-like', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(url, { authProvider: host }));
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    await client.close();
  });

  it("serves Cursor's https and loopback callbacks too, each exchanged with its verifier", async () => {
    for (const returnTo of [CURSOR_WEB, CURSOR_LOOPBACK]) {
      const host = new CursorHost(returnTo);
      expect(await auth(host, { serverUrl: url, scope: 'mcp' })).toBe('REDIRECT');
      const { location } = await consentLocation(host.authorizationUrl!, returnTo);
      expect(location.startsWith(`${returnTo}?`), location).toBe(true);
      const code = new URL(location).searchParams.get('code');
      expect(code, returnTo).toBeTruthy();
      expect(await auth(host, { serverUrl: url, authorizationCode: code! }), returnTo).toBe('AUTHORIZED');
    }
  });

  it('still requires PKCE S256 of a native app: without a challenge the app is sent invalid_request and no code', async () => {
    const host = new CursorHost(CURSOR_APP);
    expect(await auth(host, { serverUrl: url, scope: 'mcp' })).toBe('REDIRECT');
    for (const drop of [['code_challenge', 'code_challenge_method'], ['code_challenge_method']]) {
      const authorization = new URL(host.authorizationUrl!);
      if (drop.length === 1) authorization.searchParams.set('code_challenge_method', 'plain');
      else for (const name of drop) authorization.searchParams.delete(name);
      const res = await fetch(authorization, { redirect: 'manual' });
      expect([302, 303]).toContain(res.status);
      const location = res.headers.get('location') ?? '';
      expect(location.startsWith(`${CURSOR_APP}?`), location).toBe(true);
      const params = new URL(location).searchParams;
      expect(params.get('error')).toBe('invalid_request');
      expect(params.get('code')).toBeNull();
    }
  });

  it("matches a native app's loopback callback on any port (RFC 8252 §7.3), a web host's exactly", async () => {
    const native = new CursorHost(CURSOR_LOOPBACK);
    expect(await auth(native, { serverUrl: url, scope: 'mcp' })).toBe('REDIRECT');
    const otherPort = new URL(native.authorizationUrl!);
    otherPort.searchParams.set('redirect_uri', 'http://localhost:18787/callback');
    const served = await fetch(otherPort, { redirect: 'manual' });
    expect([302, 303]).toContain(served.status);
    expect(served.headers.get('location')).toContain('/oauth/interaction/');
    const otherPath = new URL(native.authorizationUrl!);
    otherPath.searchParams.set('redirect_uri', 'http://localhost:8787/elsewhere');
    expect((await fetch(otherPath, { redirect: 'manual' })).status).toBe(400);

    const web = new MemoryHost('http://127.0.0.1:8787/callback', 'web host');
    expect(await auth(web, { serverUrl: url, scope: 'mcp' })).toBe('REDIRECT');
    const webOtherPort = new URL(web.authorizationUrl!);
    webOtherPort.searchParams.set('redirect_uri', 'http://127.0.0.1:18787/callback');
    const refused = await fetch(webOtherPort, { redirect: 'manual' });
    expect(refused.status).toBe(400);
    expect(refused.headers.get('location')).toBeNull();
  });

  it("refuses at registration schemes that are no app's own, alone or beside cursor://, and non-loopback http", async () => {
    const unsafe = [
      'javascript:alert(1)//',
      'data:text/html,hi',
      'file:///etc/passwd',
      'vbscript:msgbox',
      'blob:https://example.com/0b6f',
      'about:blank',
      'ws://127.0.0.1:8787/callback',
      'http://evil.example/callback',
    ];
    for (const uri of unsafe) {
      for (const redirect_uris of [[uri], [CURSOR_APP, uri]]) {
        const res = await register({ redirect_uris, token_endpoint_auth_method: 'none' });
        const body = (await res.json()) as { error: string; error_description: string };
        expect(res.status, `${redirect_uris}: ${JSON.stringify(body)}`).toBe(400);
        expect(body.error, uri).toBe('invalid_redirect_uri');
      }
    }
  });
});
