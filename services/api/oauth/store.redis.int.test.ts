import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../../test/redis-probe.ts';
import { oauthAdapter } from './adapter.ts';
import { MemoryOAuthStore, type OAuthStore, RedisOAuthStore } from './store.ts';

/**
 * One contract for both engines of the OAuth store, through the adapter oidc-provider calls: a
 * record comes back as written, a consumed mark is seen (a code used twice), revoking a grant
 * deletes its tokens and nothing else, a session is found by its uid, and the first signing
 * secret written is the one every host reads.
 */
function contract(name: string, make: () => Promise<OAuthStore>) {
  describe(`OAuth store: ${name}`, () => {
    let store: OAuthStore;
    beforeAll(async () => {
      store = await make();
    });

    it('keeps, consumes, indexes and revokes by grant', async () => {
      const Adapter = oauthAdapter(store);
      const codes = new Adapter('AuthorizationCode');
      const tokens = new Adapter('AccessToken');
      const sessions = new Adapter('Session');
      await codes.upsert('c1', { grantId: 'g1', accountId: 'k1' }, 60);
      await tokens.upsert('t1', { grantId: 'g1', accountId: 'k1' }, 600);
      await tokens.upsert('t2', { grantId: 'g2', accountId: 'k1' }, 600);
      await sessions.upsert('s1', { uid: 'u1', accountId: 'k1' }, 600);

      expect(await codes.find('c1')).toEqual({ grantId: 'g1', accountId: 'k1' });
      await codes.consume('c1');
      expect((await codes.find('c1'))?.consumed).toEqual(expect.any(Number));
      expect(await sessions.findByUid('u1')).toMatchObject({ uid: 'u1' });

      await tokens.revokeByGrantId('g1');
      expect(await codes.find('c1')).toBeUndefined();
      expect(await tokens.find('t1')).toBeUndefined();
      expect(await tokens.find('t2')).toEqual({ grantId: 'g2', accountId: 'k1' });

      await tokens.destroy('t2');
      expect(await tokens.find('t2')).toBeUndefined();
    });

    it('keeps a registered client a while unused, the newest few at most, and as long as its grants once used', async () => {
      const list = `clients-${Math.random().toString(36).slice(2)}`;
      const Clients = oauthAdapter(store, { unusedTtlS: 2, maxUnused: 3 });
      const clients = new Clients('Client');
      const grants = new Clients('Grant');
      const ids = ['a', 'b', 'c', 'd', 'e'].map((x) => `${list}-${x}`);
      for (const id of ids.slice(0, 3)) await clients.upsert(id, { client_id: id }, 0);
      // Used: a grant saved for it takes it off the unused list and lengthens its lifetime.
      await grants.upsert(`${list}-g`, { clientId: ids[0]!, accountId: 'k1' }, 600);
      await clients.upsert(ids[3]!, { client_id: ids[3]! }, 0);
      await clients.upsert(ids[4]!, { client_id: ids[4]! }, 0);
      // Five registered, one used: of the four unused, the oldest (b) was pushed out.
      const found = async () =>
        Object.fromEntries(
          await Promise.all(ids.map(async (id) => [id.slice(-1), (await clients.find(id)) !== undefined])),
        );
      expect(await found()).toEqual({ a: true, b: false, c: true, d: true, e: true });
      await new Promise((resolve) => setTimeout(resolve, 2_100));
      // Unused ones age out; the used one lives as long as its grant.
      expect(await found()).toEqual({ a: true, b: false, c: false, d: false, e: false });
    });

    it('gives every host the secret written first', async () => {
      const first = await store.putIfAbsent('secrets-test', 'a');
      const second = await store.putIfAbsent('secrets-test', 'b');
      expect([first, second]).toEqual(['a', 'a']);
    });
  });
}

contract('in-process', async () => new MemoryOAuthStore());

const prefix = `oauth-store-${process.pid}-${Date.now()}:`;
let cache: RedisCache | undefined;
if (await shouldRunRedisSuite('OAuth store on Redis')) {
  contract('Redis', async () => {
    cache = await connectRedisCache({ url: REDIS_URL, prefix });
    return new RedisOAuthStore(cache.shared.redis, `${prefix}oauth:`);
  });
  afterAll(async () => {
    await cache?.close();
    await wipePrefix(prefix);
  });
}

describe('in-process expiry', () => {
  it('forgets a record once its lifetime has passed', async () => {
    let now = 1_000_000;
    const store = new MemoryOAuthStore(() => now);
    await store.put('x', 'v', 10);
    expect(await store.get('x')).toEqual({ value: 'v', consumedAt: null });
    now += 10_001;
    expect(await store.get('x')).toBeUndefined();
  });
});
