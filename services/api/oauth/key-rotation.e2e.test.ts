import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { MemoryEventStore } from '../../../adapters/event-store/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import {
  CHROMIUM,
  launchChromium,
  MemoryHost,
  redirectReceiver,
  signInHost,
} from '../../../test/oauth-host.ts';
import { freePort } from '../../../test/ports.ts';
import { shouldRunRedisSuite, wipePrefix } from '../../../test/redis-probe.ts';

/**
 * Rotating OAUTH_JWKS and OAUTH_COOKIE_KEYS (deploy/README, "Rotating the OAuth keys"), walked as
 * an operator does it: one api host on Redis (where the grants and tokens live), restarted on the
 * same origin with each step's keys, while MCP hosts that signed in keep calling and people are
 * part-way through the consent page in Chromium.
 *
 * What it shows: the JWKS signs nothing a host holds (access and refresh tokens are opaque and
 * looked up in the store; `openid` is refused, so no ID token is issued), so a key dropped from it
 * ends nothing. The cookie secrets sign the consent page's cookies (Koa's keygrip: the first
 * signs, every one listed verifies): a sign-in under way survives a secret put second, and only
 * one whose cookies were signed by a secret no longer listed is refused, with the page "This
 * sign-in has expired" (400).
 */
const run = existsSync(CHROMIUM) && (await shouldRunRedisSuite('OAuth key rotation'));

const rsaKey = (kid: string) => ({
  ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }),
  kid,
  alg: 'RS256',
  use: 'sig',
});
const jwks = (...keys: object[]) => JSON.stringify({ keys });

describe.runIf(run || process.env.CI === 'true')('rotating the OAuth signing keys and cookie secrets', () => {
  const prefix = `key-rotation-${process.pid}-${Date.now()}:`;
  const A = rsaKey('key-A');
  const B = rsaKey('key-B');
  const cookieA = randomBytes(32).toString('base64url');
  const cookieB = randomBytes(32).toString('base64url');
  const eventStore = new MemoryEventStore();
  let cache: RedisCache;
  let port: number;
  let base: string;
  let url: URL;
  let server: Awaited<ReturnType<typeof startKeyedServer>> | undefined;
  let chromium: Awaited<ReturnType<typeof launchChromium>>;
  let key: string;
  const receivers: Awaited<ReturnType<typeof redirectReceiver>>[] = [];

  /** The api host (re)started on the same origin, log and Redis with these keys. */
  const start = async (keys: object[], cookieKeys: string[]) => {
    // A restart ends every connection (Chromium's open pages hold some that are never idle, which
    // a graceful close would wait out).
    server?.app.server.closeAllConnections();
    await server?.close();
    server = await startKeyedServer({
      cache,
      port,
      eventStore,
      env: { PUBLIC_BASE_URL: base, OAUTH_JWKS: jwks(...keys), OAUTH_COOKIE_KEYS: cookieKeys.join(',') },
    });
  };

  beforeAll(async () => {
    cache = await connectRedisCache({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
    port = await freePort();
    base = `http://127.0.0.1:${port}`;
    url = new URL(`${base}/mcp/signin`);
    chromium = await launchChromium();
  });
  afterAll(async () => {
    await chromium?.close();
    server?.app.server.closeAllConnections();
    await server?.close();
    for (const receiver of receivers) await receiver.close();
    await cache?.close();
    await wipePrefix(prefix);
  });

  const receiver = async () => {
    const made = await redirectReceiver();
    receivers.push(made);
    return made;
  };

  /** A tool call on /mcp/signin with this access token: its HTTP status. */
  const call = async (access: string) =>
    (
      await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${access}`,
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'get_market_regime', arguments: { coin: 'ETH', exchange: 'BINANCE' } },
        }),
      })
    ).status;

  /** Renews the host's tokens with its refresh token, as its SDK does: the status and what came back. */
  const refresh = async (host: MemoryHost) => {
    const res = await fetch(`${base}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: host.saved!.refresh_token!,
        client_id: host.info!.client_id,
      }),
    });
    const body = (await res.json()) as Record<string, string>;
    if (res.status === 200) host.saved = { ...host.saved!, ...body } as MemoryHost['saved'];
    return { status: res.status, body };
  };

  const published = async () =>
    ((await (await fetch(`${base}/oauth/jwks`)).json()) as { keys: { kid: string; d?: string }[] }).keys;

  /**
   * A person part-way through a sign-in: the host met the 401 and sent them to the consent page,
   * which is open in Chromium (its interaction cookies set) and not yet submitted.
   */
  const openConsent = async (name: string) => {
    const back = await receiver();
    const host = new MemoryHost(back.url, name);
    await new McpClient({ name: 'agent', version: '1.0.0' })
      .connect(new StreamableHTTPClientTransport(url, { authProvider: host }))
      .catch(() => undefined);
    const page: Page = await chromium.browser.newPage();
    await page.goto(String(host.authorizationUrl));
    await page.waitForSelector('#api_key');
    return { host, page, back };
  };

  /** Submits the open consent page: the host's tokens once it came back, or the page it got instead. */
  const submit = async ({ host, page, back }: Awaited<ReturnType<typeof openConsent>>) => {
    await page.fill('#api_key', key);
    let refused = 0;
    page.on('response', (r) => {
      if (r.request().method() === 'POST' && r.status() >= 400) refused = r.status();
    });
    await page.click('#allow');
    const expired = await Promise.race([
      page.waitForURL(/\/callback\?/).then(() => false),
      page.waitForSelector('h1:text-is("This sign-in has expired")').then(() => true),
    ]);
    if (expired) {
      const title = await page.textContent('h1');
      await page.close();
      return { status: refused, title };
    }
    const code = (await back.next()).get('code')!;
    await page.close();
    await new StreamableHTTPClientTransport(url, { authProvider: host }).finishAuth(code);
    return { status: 200, title: '' };
  };

  let signedIn: MemoryHost;
  let underWayA1: Awaited<ReturnType<typeof openConsent>>;
  let underWayA2: Awaited<ReturnType<typeof openConsent>>;
  let underWayB: Awaited<ReturnType<typeof openConsent>>;

  it('with keys A: a host signs in (no ID token), two people are left part-way through the consent page', async () => {
    await start([A], [cookieA]);
    key = (await server!.issue('pro')).key;
    signedIn = (
      await signInHost({ url, key, browser: chromium.browser }, await receiver(), 'signed in under A')
    ).host;
    // Nothing the host holds is a JWT the JWKS signed: no ID token, opaque access and refresh tokens.
    expect(signedIn.saved!.id_token).toBeUndefined();
    expect(
      [signedIn.saved!.access_token, signedIn.saved!.refresh_token].map((t) => t?.split('.').length),
    ).toEqual([1, 1]);
    expect(await call(signedIn.saved!.access_token)).toBe(200);
    expect((await published()).map((k) => [k.kid, k.d])).toEqual([['key-A', undefined]]);
    underWayA1 = await openConsent('under way under A, finished under B,A');
    underWayA2 = await openConsent('under way under A, finished under B');
  });

  it('restarted with [B, A]: the tokens work and refresh, the sign-in under way completes, B is published first', async () => {
    await start([B, A], [cookieB, cookieA]);
    expect((await published()).map((k) => k.kid)).toEqual(['key-B', 'key-A']);
    expect(await call(signedIn.saved!.access_token)).toBe(200);
    expect((await refresh(signedIn)).status).toBe(200);
    expect(signedIn.saved!.id_token).toBeUndefined();
    expect(await call(signedIn.saved!.access_token)).toBe(200);
    expect(await submit(underWayA1)).toEqual({ status: 200, title: '' });
    expect(await call(underWayA1.host.saved!.access_token)).toBe(200);
    underWayB = await openConsent('under way under B,A, finished under B');
  });

  it('restarted with [B] only: every token still works and refreshes; only a sign-in whose cookies only A signed is refused', async () => {
    await start([B], [cookieB]);
    expect((await published()).map((k) => k.kid)).toEqual(['key-B']);
    for (const host of [signedIn, underWayA1.host]) {
      expect(await call(host.saved!.access_token)).toBe(200);
      expect((await refresh(host)).status).toBe(200);
      expect(await call(host.saved!.access_token)).toBe(200);
    }
    expect(await submit(underWayB)).toEqual({ status: 200, title: '' });
    expect(await call(underWayB.host.saved!.access_token)).toBe(200);
    expect(await submit(underWayA2)).toEqual({ status: 400, title: 'This sign-in has expired' });
    // Started again from the host, that person signs in.
    const again = await openConsent('signed in again under B');
    expect(await submit(again)).toEqual({ status: 200, title: '' });
    expect(await call(again.host.saved!.access_token)).toBe(200);
  });

  it('a host that does not list the secret signing a cookie refuses it: with several replicas, list the new secret second everywhere first', async () => {
    const signedByB = await openConsent('cookies signed with B, submitted to a replica still on A');
    await start([A], [cookieA]);
    expect(await submit(signedByB)).toEqual({ status: 400, title: 'This sign-in has expired' });
    expect(await call(signedIn.saved!.access_token)).toBe(200);
  });
});
