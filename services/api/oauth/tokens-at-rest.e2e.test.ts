import { existsSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { CHROMIUM, redirectReceiver, signInHost, signinStage } from '../../../test/oauth-host.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../../test/redis-probe.ts';
import { oauthAdapter } from './adapter.ts';
import { MemoryOAuthStore } from './store.ts';

/**
 * A security review of the sign-in for MCP hosts: API keys are kept by their hash only, but the
 * OAuth tokens a sign-in hands a host (each acting as the key it signed in with) were kept in
 * Redis under their own value (`oauth:RefreshToken:<token>`, the token again as the record's
 * `jti`), so whoever reads the Redis, or the RDB snapshot deploy/README says to back up, held
 * every host's live access and refresh tokens. Now nothing kept there can be presented.
 */
const run = existsSync(CHROMIUM) && (await shouldRunRedisSuite('OAuth tokens at rest'));

/** Every key and value under the prefix, as text. */
async function everythingKept(redis: Redis, prefix: string): Promise<string> {
  const keys = await redis.keys(`${prefix}*`);
  const parts: string[] = [];
  for (const key of keys) {
    const type = await redis.type(key);
    const value =
      type === 'string'
        ? await redis.get(key)
        : type === 'set'
          ? (await redis.smembers(key)).join(' ')
          : type === 'zset'
            ? (await redis.zrange(key, '0', '-1')).join(' ')
            : type === 'list'
              ? (await redis.lrange(key, '0', '-1')).join(' ')
              : type === 'hash'
                ? JSON.stringify(await redis.hgetall(key))
                : `(${type})`;
    parts.push(`${key} = ${value}`);
  }
  return parts.join('\n');
}

describe.runIf(run || process.env.CI === 'true')('OAuth tokens at rest (Redis)', () => {
  const prefix = `tokens-at-rest-${process.pid}-${Date.now()}:`;
  let cache: RedisCache;
  let redis: Redis;
  let stage: Awaited<ReturnType<typeof signinStage>>;
  let receiver: Awaited<ReturnType<typeof redirectReceiver>>;

  beforeAll(async () => {
    cache = await connectRedisCache({ url: REDIS_URL, prefix });
    redis = new Redis(REDIS_URL);
    stage = await signinStage({ cache });
    receiver = await redirectReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stage?.close();
    await cache?.close();
    redis?.disconnect();
    await wipePrefix(prefix);
  });

  it('a signed-in host works, refreshes and is revoked, and Redis never holds a token it was given', async () => {
    const { host, code } = await signInHost(stage, receiver, 'tokens at rest');
    const given = [code, host.saved!.access_token, host.saved!.refresh_token!];
    // The person's sign-in session: its id is the cookie that resumes it.
    const sessionId = (await stage.browser.cookies()).find((c) => c.name === '_session')?.value;
    expect(sessionId).toBeDefined();
    given.push(sessionId!);
    const registration = (host.info as { registration_access_token?: string }).registration_access_token;
    if (registration !== undefined) given.push(registration);

    const client = new Client({ name: 'agent', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(stage.url, { authProvider: host }));
    const regime = () =>
      client
        .callTool({ name: 'get_market_regime', arguments: { coin: 'ETH', exchange: 'BINANCE' } })
        .then((result) =>
          result.isError ? `tool error ${JSON.stringify(result.structuredContent)}` : 'served',
        );
    expect(await regime()).toBe('served');
    // Refused as an expired one is: the SDK refreshes with the refresh token and goes on.
    host.saved = { ...host.saved!, access_token: 'expired-access-token' };
    expect(await regime()).toBe('served');
    given.push(host.saved!.access_token, host.saved!.refresh_token!);
    await client.close();

    // A sign-in left open on its page: its uid (in its cookie and URL) resumes it.
    await stage.browser.clearCookies();
    const page = await stage.browser.newPage();
    await page.goto(String(host.authorizationUrl));
    const uid = /\/interaction\/([^/?#]+)/.exec(page.url())?.[1];
    await page.close();
    expect(uid).toBeDefined();
    given.push(uid!);

    const kept = await everythingKept(redis, prefix);
    expect(kept).toContain('RefreshToken');
    expect(kept).toContain('Session:');
    expect(kept).toContain('Interaction:');
    for (const token of given) expect(kept).not.toContain(token);

    // Revoking the refresh token still ends the sign-in (the grant's records found by their hash).
    const revoked = await fetch(new URL('/oauth/revoke', stage.url), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_id: host.info!.client_id, token: host.saved!.refresh_token! }),
    });
    expect(revoked.status).toBe(200);
    const refreshed = await fetch(new URL('/oauth/token', stage.url), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        client_id: host.info!.client_id,
        grant_type: 'refresh_token',
        refresh_token: host.saved!.refresh_token!,
      }),
    });
    expect(refreshed.status).toBe(400);
    expect(await refreshed.json()).toMatchObject({ error: 'invalid_grant' });
  }, 120_000);
});

describe('a token saved before ids were hashed', () => {
  it('a session saved before is still found by its id and by its uid, and ended', async () => {
    const store = new MemoryOAuthStore();
    const sessions = new (oauthAdapter(store))('Session');
    const payload = {
      jti: 'old-session-id',
      kind: 'Session',
      uid: 'u1',
      accountId: 'k1',
      exp: 4_000_000_000,
    };
    await store.put('Session:old-session-id', JSON.stringify(payload), 3_600);
    await store.put('sessionUid:u1', 'old-session-id', 3_600);
    expect(await sessions.find('old-session-id')).toMatchObject(payload);
    expect(await sessions.findByUid('u1')).toMatchObject({ accountId: 'k1', uid: 'u1' });
    await sessions.destroy('old-session-id');
    expect(await sessions.find('old-session-id')).toBeUndefined();
  });

  it('a session and an interaction are kept under the hash of their id, and found by it', async () => {
    const store = new MemoryOAuthStore();
    const Adapter = oauthAdapter(store);
    const sessions = new Adapter('Session');
    const interactions = new Adapter('Interaction');
    await sessions.upsert(
      'session-id',
      { jti: 'session-id', kind: 'Session', uid: 'u2', accountId: 'k2' },
      600,
    );
    await interactions.upsert(
      'interaction-uid',
      { jti: 'interaction-uid', kind: 'Interaction', uid: 'interaction-uid' } as never,
      600,
    );
    expect(await store.get('Session:session-id')).toBeUndefined();
    expect(await store.get('Interaction:interaction-uid')).toBeUndefined();
    expect(JSON.stringify(await store.get('sessionUid:u2'))).not.toContain('session-id');
    expect(await sessions.find('session-id')).toMatchObject({ jti: 'session-id', accountId: 'k2' });
    expect(await sessions.findByUid('u2')).toMatchObject({ uid: 'u2', accountId: 'k2' });
    expect(await interactions.find('interaction-uid')).toMatchObject({ jti: 'interaction-uid' });
  });

  it('is still found, consumed and ended under its old key', async () => {
    const store = new MemoryOAuthStore();
    const Adapter = oauthAdapter(store);
    const tokens = new Adapter('RefreshToken');
    const payload = { jti: 'old-refresh-token', kind: 'RefreshToken', grantId: 'g1', exp: 4_000_000_000 };
    await store.put('RefreshToken:old-refresh-token', JSON.stringify(payload), 3_600);
    await store.addMember('grant:g1', 'RefreshToken:old-refresh-token', 3_600);
    expect(await tokens.find('old-refresh-token')).toMatchObject(payload);
    await tokens.consume('old-refresh-token');
    expect((await store.get('RefreshToken:old-refresh-token'))?.consumedAt).not.toBeNull();
    await tokens.destroy('old-refresh-token');
    expect(await tokens.find('old-refresh-token')).toBeUndefined();
    expect(await store.members('grant:g1')).toEqual([]);
  });
});
