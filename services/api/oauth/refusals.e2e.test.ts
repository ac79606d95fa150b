import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { CHROMIUM, consentWithKey, launchChromium, redirectReceiver } from '../../../test/oauth-host.ts';
import { freePort } from '../../../test/ports.ts';
import { REDIS_URL, wipePrefix } from '../../../test/redis-probe.ts';
import { revokeKey } from '../../keys/key-commands.ts';

/**
 * Every way a sign-in must fail, against the authorization server on the shared (Redis) store:
 * a redirect URI that is not the registered one, a missing or wrong PKCE verifier, a plain
 * challenge, a code used twice, a token that expired, was revoked (itself, its grant, its key)
 * or was issued for another resource.
 */
const present = existsSync(CHROMIUM);
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

describe.runIf(present || process.env.CI === 'true')('OAuth sign-in refusals', () => {
  let server: Server;
  let cache: RedisCache;
  let base: string;
  let resource: string;
  let key: { key: string; keyId: string };
  let receiver: Awaited<ReturnType<typeof redirectReceiver>>;
  let chromium: Awaited<ReturnType<typeof launchChromium>>;
  let browser: BrowserContext;
  let clientId: string;
  const prefix = `oauth-refusals-${process.pid}-${Date.now()}:`;

  const register = async (redirect: string): Promise<string> => {
    const res = await fetch(`${base}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        client_name: 'refusal host',
        redirect_uris: [redirect],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { client_id: string }).client_id;
  };

  const authorizeUrl = (params: Record<string, string | undefined>) => {
    const url = new URL(`${base}/oauth/authorize`);
    const all: Record<string, string | undefined> = {
      response_type: 'code',
      client_id: clientId,
      redirect_uri: receiver.url,
      scope: 'mcp',
      state: randomBytes(8).toString('hex'),
      resource,
      code_challenge_method: 'S256',
      ...params,
    };
    for (const [name, value] of Object.entries(all))
      if (value !== undefined) url.searchParams.set(name, value);
    return url;
  };

  /** A code from a real consent in Chromium, for this challenge. */
  const codeFor = async (challenge: string): Promise<string> => {
    const returned = receiver.next();
    await consentWithKey(browser, authorizeUrl({ code_challenge: challenge }), key.key);
    const params = await returned;
    expect(params.get('error')).toBeNull();
    expect(params.get('code')).toBeTruthy();
    return params.get('code')!;
  };

  const token = async (params: Record<string, string | undefined>) => {
    const body = new URLSearchParams();
    for (const [name, value] of Object.entries({ client_id: clientId, ...params })) {
      if (value !== undefined) body.set(name, value);
    }
    const res = await fetch(`${base}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body,
    });
    return { status: res.status, body: (await res.json()) as Record<string, string> };
  };

  const exchange = (code: string, verifier: string | undefined) =>
    token({
      grant_type: 'authorization_code',
      code,
      code_verifier: verifier,
      redirect_uri: receiver.url,
      resource,
    });

  /** A fresh signed-in pair of tokens. */
  const signIn = async () => {
    const { verifier, challenge } = pkce();
    const tokens = await exchange(await codeFor(challenge), verifier);
    expect(tokens.status).toBe(200);
    return tokens.body as { access_token: string; refresh_token: string };
  };

  const callSignin = async (accessToken: string) => {
    const res = await fetch(`${base}/mcp/signin`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${accessToken}`,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    await res.text();
    return { status: res.status, challenge: res.headers.get('www-authenticate') ?? '' };
  };

  beforeAll(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    resource = `${base}/mcp/signin`;
    cache = await connectRedisCache({ url: REDIS_URL, prefix });
    server = await startKeyedServer({ cache, port, env: { PUBLIC_BASE_URL: base } });
    key = await server.issue('pro');
    receiver = await redirectReceiver();
    chromium = await launchChromium();
    browser = chromium.browser;
    clientId = await register(receiver.url);
  });
  afterAll(async () => {
    await chromium?.close();
    await receiver?.close();
    await server?.close();
    await cache?.close();
    await wipePrefix(prefix);
  });

  it('serves a good token, and keeps its state in Redis (shared by every api host)', async () => {
    const { access_token } = await signIn();
    expect((await callSignin(access_token)).status).toBe(200);
    const probe = await connectRedisCache({ url: REDIS_URL, prefix: 'unused:' });
    try {
      const keys = await probe.shared.redis.keys(`${prefix}oauth:AccessToken:*`);
      expect(keys.length).toBeGreaterThan(0);
    } finally {
      await probe.close();
    }
  });

  it('refuses a redirect URI other than the registered one, without redirecting to it', async () => {
    const res = await fetch(
      authorizeUrl({ redirect_uri: `${receiver.url}/elsewhere`, code_challenge: pkce().challenge }),
      {
        redirect: 'manual',
      },
    );
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(await res.text()).toContain('redirect_uri');
  });

  it('refuses to register a plain-http redirect URI that is not on a loopback host (OAuth 2.1, MCP profile)', async () => {
    const res = await fetch(`${base}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        redirect_uris: ['http://evil.example/cb'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe('invalid_redirect_uri');
  });

  it('refuses client metadata past its bounds with invalid_client_metadata, storing nothing', async () => {
    const probe = await connectRedisCache({ url: REDIS_URL, prefix: 'unused:' });
    try {
      const clients = () => probe.shared.redis.keys(`${prefix}oauth:Client:*`);
      const before = (await clients()).length;
      const cb = 'https://a.example/cb';
      const refused: [Record<string, unknown>, string][] = [
        [{ client_name: 'A'.repeat(50_000) }, 'the client_name given is 50000 characters long; at most 200'],
        [
          { redirect_uris: Array.from({ length: 11 }, (_, i) => `${cb}${i}`) },
          'the redirect_uris given has 11 entries; at most 10',
        ],
        [
          { redirect_uris: [`${cb}?${'x'.repeat(3_000)}`] },
          'the redirect_uris given has an entry 3021 characters long; at most 2000',
        ],
        [
          { logo_uri: `https://a.example/${'l'.repeat(2_000)}` },
          'the logo_uri given is 2018 characters long; at most 2000',
        ],
        [
          { contacts: Array.from({ length: 6 }, (_, i) => `c${i}@a.example`) },
          'the contacts given has 6 entries; at most 5',
        ],
        [
          { redirect_uris: Array.from({ length: 10 }, (_, i) => `${cb}/${i}/${'p'.repeat(1_000)}`) },
          'the client metadata is',
        ],
      ];
      for (const [metadata, why] of refused) {
        const res = await fetch(`${base}/oauth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ redirect_uris: [cb], token_endpoint_auth_method: 'none', ...metadata }),
        });
        expect(res.status, why).toBe(400);
        const body = (await res.json()) as { error: string; error_description: string };
        expect(body.error, why).toBe('invalid_client_metadata');
        expect(body.error_description, why).toContain(why);
      }
      expect((await clients()).length).toBe(before);
    } finally {
      await probe.close();
    }
  });

  it('keeps a client never used for a grant a day at most, and one used as long as its refresh tokens', async () => {
    const probe = await connectRedisCache({ url: REDIS_URL, prefix: 'unused:' });
    try {
      const redis = probe.shared.redis;
      const fresh = await register('https://fresh.example/cb');
      const freshTtl = await redis.ttl(`${prefix}oauth:Client:${fresh}`);
      expect(freshTtl).toBeGreaterThan(86_000);
      expect(freshTtl).toBeLessThanOrEqual(86_400);
      expect(await redis.zscore(`${prefix}oauth:clients:unused`, fresh)).not.toBeNull();
      // Its registration access token (the library gives it no lifetime) lives as long as the client.
      const ratKey = async (id: string) =>
        `${prefix}oauth:${await redis.get(`${prefix}oauth:clientRat:${id}`)}`;
      expect(await ratKey(fresh)).toMatch(/:RegistrationAccessToken:/);
      const freshRatTtl = await redis.ttl(await ratKey(fresh));
      expect(freshRatTtl).toBeGreaterThan(86_000);
      expect(freshRatTtl).toBeLessThanOrEqual(86_400);
      // The suite's client, once signed in with: its lifetime is its refresh token's (30 days), its token's too.
      await signIn();
      expect(await redis.ttl(`${prefix}oauth:Client:${clientId}`)).toBeGreaterThan(29 * 86_400);
      expect(await redis.ttl(await ratKey(clientId))).toBeGreaterThan(29 * 86_400);
      expect(await redis.zscore(`${prefix}oauth:clients:unused`, clientId)).toBeNull();
    } finally {
      await probe.close();
    }
  });

  it('takes https client IDs (metadata documents) but never fetches one from a private address', async () => {
    const metadata = (await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json()) as {
      client_id_metadata_document_supported?: boolean;
    };
    expect(metadata.client_id_metadata_document_supported).toBe(true);
    const res = await fetch(
      authorizeUrl({ client_id: 'https://127.0.0.1/client.json', code_challenge: pkce().challenge }),
      { redirect: 'manual' },
    );
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(await res.text()).toContain('invalid_client');
  });

  it('refuses an authorization request without a PKCE challenge, or with the plain method', async () => {
    for (const params of [
      { code_challenge: undefined },
      { code_challenge: pkce().verifier, code_challenge_method: 'plain' },
    ]) {
      const res = await fetch(authorizeUrl(params), { redirect: 'manual' });
      expect(res.status).toBe(303);
      const back = new URL(res.headers.get('location')!);
      expect(`${back.origin}${back.pathname}`).toBe(receiver.url);
      expect(back.searchParams.get('error')).toBe('invalid_request');
    }
  });

  it('refuses a code exchanged without its verifier or with a wrong one', async () => {
    const missing = await exchange(await codeFor(pkce().challenge), undefined);
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatch(/^invalid_(grant|request)$/);
    const wrong = await exchange(await codeFor(pkce().challenge), pkce().verifier);
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe('invalid_grant');
  });

  it('refuses a code used twice, and ends the tokens it gave the first time', async () => {
    const { verifier, challenge } = pkce();
    const code = await codeFor(challenge);
    const first = await exchange(code, verifier);
    expect(first.status).toBe(200);
    expect((await callSignin(first.body.access_token!)).status).toBe(200);
    const second = await exchange(code, verifier);
    expect(second.status).toBe(400);
    expect(second.body.error).toBe('invalid_grant');
    const after = await callSignin(first.body.access_token!);
    expect(after.status).toBe(401);
    expect(after.challenge).toContain('error="invalid_token"');
  });

  it('serves a code exchanged several times at once only once, and ends the sign-in as for a reuse', async () => {
    const { verifier, challenge } = pkce();
    const code = await codeFor(challenge);
    const answers = await Promise.all(Array.from({ length: 5 }, () => exchange(code, verifier)));
    const served = answers.filter((a) => a.status === 200);
    expect(served).toHaveLength(1);
    for (const refused of answers.filter((a) => a.status !== 200)) {
      expect(refused.status).toBe(400);
      expect(refused.body.error).toBe('invalid_grant');
    }
    const after = await callSignin(served[0]!.body.access_token!);
    expect(after.status).toBe(401);
    expect(after.challenge).toContain('error="invalid_token"');
    const refresh = await token({
      grant_type: 'refresh_token',
      refresh_token: served[0]!.body.refresh_token,
    });
    expect(refresh.status).toBe(400);
    expect(refresh.body.error).toBe('invalid_grant');
  });

  it('says the grant ended (grant.revoked, the log line of a reuse) when an exchange of a raced code ends it in the store', async () => {
    // An exchange that read the code before another used it is refused where the store marks it
    // used (adapter.ts consume), and ends the grant there unless another refusal already did; one
    // that read it used is refused by the library, which ends the grant and says so (the log line
    // of signin.ts). The store's ending must say so too. Rounds until one did.
    const provider = server.channel.oauth!.provider();
    let told = false;
    for (let round = 0; round < 10 && !told; round += 1) {
      const { verifier, challenge } = pkce();
      const code = await codeFor(challenge);
      const grantId = (await provider.AuthorizationCode.find(code))!.grantId!;
      const ended: string[] = [];
      const refusals: string[] = [];
      const revoked = (_ctx: unknown, id: string) => {
        if (id === grantId) ended.push(id);
      };
      const refused = (_ctx: unknown, err: { error_detail?: string }) =>
        refusals.push(String(err.error_detail));
      provider.on('grant.revoked', revoked);
      provider.on('grant.error', refused);
      try {
        const answers = await Promise.all(Array.from({ length: 8 }, () => exchange(code, verifier)));
        expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
        // The library says so once for each refusal of its own; any more came from the store.
        const byLibrary = refusals.filter((detail) => detail === 'authorization code already consumed');
        expect(ended.length, JSON.stringify(refusals)).toBeGreaterThanOrEqual(byLibrary.length);
        told = ended.length > byLibrary.length;
      } finally {
        provider.off('grant.revoked', revoked);
        provider.off('grant.error', refused);
      }
    }
    expect(told, 'no exchange refused in the store said it ended the grant, in 10 rounds').toBe(true);
  });

  it('refuses a token for another resource, at the authorization server and at /mcp/signin', async () => {
    const res = await fetch(
      authorizeUrl({ resource: 'http://other.example/mcp', code_challenge: pkce().challenge }),
      {
        redirect: 'manual',
      },
    );
    expect(res.status).toBe(303);
    expect(new URL(res.headers.get('location')!).searchParams.get('error')).toBe('invalid_target');

    // A token the library itself issues for another audience, on a real grant, is refused here.
    const { access_token } = await signIn();
    const provider = server.channel.oauth!.provider();
    const real = (await provider.AccessToken.find(access_token))!;
    const client = (await provider.Client.find(clientId))!;
    const foreign = await new provider.AccessToken({
      accountId: real.accountId,
      client,
      grantId: real.grantId!,
      gty: 'authorization_code',
      scope: 'mcp',
      aud: 'http://other.example/mcp',
    }).save();
    const refused = await callSignin(foreign);
    expect(refused.status).toBe(401);
    expect(refused.challenge).toContain('another resource');
    expect((await callSignin(access_token)).status).toBe(200);
  });

  it('refuses an expired token', async () => {
    const { access_token } = await signIn();
    const provider = server.channel.oauth!.provider();
    const real = (await provider.AccessToken.find(access_token))!;
    const client = (await provider.Client.find(clientId))!;
    const brief = new provider.AccessToken({
      accountId: real.accountId,
      client,
      grantId: real.grantId!,
      gty: 'authorization_code',
      scope: 'mcp',
      aud: resource,
      expiresIn: 1,
    });
    const value = await brief.save();
    const exp = (await provider.AccessToken.find(value))!.exp!;
    expect(exp - Math.floor(Date.now() / 1_000)).toBeLessThanOrEqual(1);
    // Waits on the clock passing the token's own expiry (a condition, not a timed assertion).
    while (Math.floor(Date.now() / 1_000) <= exp) await new Promise((r) => setTimeout(r, 100));
    const refused = await callSignin(value);
    expect(refused.status).toBe(401);
    expect(refused.challenge).toContain('error="invalid_token"');
  });

  it('ends a grant when its refresh token is revoked (RFC 7009): access and refresh both refused', async () => {
    const { access_token, refresh_token } = await signIn();
    expect((await callSignin(access_token)).status).toBe(200);
    const revoked = await fetch(`${base}/oauth/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        client_id: clientId,
        token: refresh_token,
        token_type_hint: 'refresh_token',
      }),
    });
    expect(revoked.status).toBe(200);
    expect((await callSignin(access_token)).status).toBe(401);
    const refreshed = await token({ grant_type: 'refresh_token', refresh_token, resource });
    expect(refreshed.status).toBe(400);
    expect(refreshed.body.error).toBe('invalid_grant');
  });

  it('refuses to revoke a token issued to another client (RFC 7009 §2.1), rather than a 200 that revoked nothing', async () => {
    const { access_token, refresh_token } = await signIn();
    // A host that registered again (its first client forgotten) signs the person out with its new
    // client_id: a 200 would tell it the sign-in ended while every token still works.
    const other = await register(receiver.url);
    for (const presented of [refresh_token, access_token]) {
      const res = await fetch(`${base}/oauth/revoke`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ client_id: other, token: presented }),
      });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: string; error_description: string };
      expect(body.error).toBe('invalid_grant');
      expect(body.error_description).toContain('another client');
    }
    expect((await callSignin(access_token)).status).toBe(200);
    // A token no client holds is still answered 200 (RFC 7009 §2.2: invalid tokens cause no error).
    const unknown = await fetch(`${base}/oauth/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_id: other, token: randomBytes(32).toString('base64url') }),
    });
    expect(unknown.status).toBe(200);
  });

  it('ends every token of a key when the key is revoked', async () => {
    const { access_token, refresh_token } = await signIn();
    expect((await callSignin(access_token)).status).toBe(200);
    const position = await revokeKey(server.store, `apikey-${key.keyId}`, key.keyId, 'test: revoked');
    await server.channel.registry.waitFor(position);
    const refused = await callSignin(access_token);
    expect(refused.status).toBe(401);
    expect(refused.challenge).toContain('revoked');
    const refreshed = await token({ grant_type: 'refresh_token', refresh_token, resource });
    expect(refreshed.status).toBe(400);
    expect(refreshed.body.error).toBe('invalid_grant');
  });
});
