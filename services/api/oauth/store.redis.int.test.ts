import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../../test/redis-probe.ts';
import { oauthAdapter, REFRESH_REUSE_GRACE_S } from './adapter.ts';
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

      // An id that is the token itself is given back as the record's jti (the store keeps its hash only).
      expect(await codes.find('c1')).toEqual({ grantId: 'g1', accountId: 'k1', jti: 'c1' });
      await codes.consume('c1');
      expect((await codes.find('c1'))?.consumed).toEqual(expect.any(Number));
      expect(await sessions.findByUid('u1')).toMatchObject({ uid: 'u1' });

      await tokens.revokeByGrantId('g1');
      expect(await codes.find('c1')).toBeUndefined();
      expect(await tokens.find('t1')).toBeUndefined();
      expect(await tokens.find('t2')).toEqual({ grantId: 'g2', accountId: 'k1', jti: 't2' });

      await tokens.destroy('t2');
      expect(await tokens.find('t2')).toBeUndefined();
    });

    it('marks a code consumed once: a second consume is refused invalid_grant and ends its grant', async () => {
      const Adapter = oauthAdapter(store);
      const codes = new Adapter('AuthorizationCode');
      const tokens = new Adapter('AccessToken');
      const grants = new Adapter('Grant');
      await grants.upsert('g-once', { accountId: 'k1', clientId: 'c' }, 600);
      await codes.upsert('c-once', { grantId: 'g-once', accountId: 'k1' }, 60);
      await tokens.upsert('t-once', { grantId: 'g-once', accountId: 'k1' }, 600);
      // Two exchanges that both read the code unconsumed: the store marks it for one of them.
      const both = await Promise.allSettled([codes.consume('c-once'), codes.consume('c-once')]);
      expect(both.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
      const refused = both.find((s) => s.status === 'rejected') as PromiseRejectedResult;
      expect(refused.reason).toMatchObject({ error: 'invalid_grant' });
      expect(await grants.find('g-once')).toBeUndefined();
      expect(await tokens.find('t-once')).toBeUndefined();
      expect(await codes.find('c-once')).toBeUndefined();
    });

    it('lets a rotated refresh token refresh again only within the grace of its first use', async () => {
      // A reuse inside the grace must not move the first use: else a token replayed every few
      // seconds (a thief's) would refresh for good, never seen as reused.
      const Adapter = oauthAdapter(store);
      const tokens = new Adapter('RefreshToken');
      const codes = new Adapter('AuthorizationCode');
      const id = `grace-${Math.random().toString(36).slice(2)}`;
      await tokens.upsert(id, { grantId: `${id}-grant`, accountId: 'k1' }, 600);
      await codes.upsert(`${id}-code`, { grantId: `${id}-grant`, accountId: 'k1' }, 600);
      vi.useFakeTimers({ toFake: ['Date'] });
      try {
        const start = Date.now();
        await tokens.consume(id);
        await codes.consume(`${id}-code`);
        // A code has no grace: its reuse is seen at once.
        expect((await codes.find(`${id}-code`))?.consumed).toEqual(expect.any(Number));
        expect((await tokens.find(id))?.consumed).toBeUndefined();
        vi.setSystemTime(start + (REFRESH_REUSE_GRACE_S - 5) * 1_000);
        expect((await tokens.find(id))?.consumed).toBeUndefined();
        await tokens.consume(id);
        vi.setSystemTime(start + (REFRESH_REUSE_GRACE_S + 2) * 1_000);
        expect((await tokens.find(id))?.consumed).toBe(Math.floor(start / 1_000));
      } finally {
        vi.useRealTimers();
      }
    });

    it('keeps a registered client a while unused, the newest few at most, and as long as its grants once used', async () => {
      const idPrefix = `clients-${Math.random().toString(36).slice(2)}`;
      const Clients = oauthAdapter(store, { unusedTtlS: 2, maxUnused: 3, signInS: 60 });
      const clients = new Clients('Client');
      const rats = new Clients('RegistrationAccessToken');
      const grants = new Clients('Grant');
      const interactions = new Clients('Interaction');
      const ids = ['a', 'b', 'c', 'd', 'e', 'f'].map((x) => `${idPrefix}-${x}`);
      const register = async (id: string) => {
        await clients.upsert(id, { client_id: id }, 0);
        // The library saves a registration's access token with no lifetime (ttl not configured).
        await rats.upsert(`${id}-rat`, { clientId: id }, undefined as unknown as number);
      };
      for (const id of ids.slice(0, 3)) await register(id);
      // Used: a grant saved for it takes it off the unused list and lengthens its lifetime.
      await grants.upsert(`${idPrefix}-g`, { clientId: ids[0]!, accountId: 'k1' }, 600);
      // A sign-in under way with b (its Interaction saved): not pushed out while it lasts.
      await interactions.upsert(`${idPrefix}-i`, { params: { client_id: ids[1]! } }, 60);
      // Another host saved a grant for c (its lifetime lengthened) but has not yet taken it off the list.
      await store.extend(`Client:${ids[2]!}`, 600);
      await register(ids[3]!);
      await register(ids[4]!); // pushes out c: kept, as it was used meanwhile
      await register(ids[5]!); // pushes out d (b is spared): deleted, with its access token
      const found = async () =>
        Object.fromEntries(
          await Promise.all(
            ids.map(async (id) => [
              id.slice(-1),
              [(await clients.find(id)) !== undefined, (await rats.find(`${id}-rat`)) !== undefined],
            ]),
          ),
        );
      expect(await found()).toEqual({
        a: [true, true],
        b: [true, true],
        c: [true, true],
        d: [false, false],
        e: [true, true],
        f: [true, true],
      });
      await new Promise((resolve) => setTimeout(resolve, 2_100));
      // Unused ones age out with their tokens; the used ones live as long as their grant (a's token too).
      expect(await found()).toEqual({
        a: [true, true],
        b: [false, false],
        c: [true, false],
        d: [false, false],
        e: [false, false],
        f: [false, false],
      });
    });

    it('never pushes out the client being registered, even when every other one is signing in', async () => {
      const idPrefix = `admitted-${Math.random().toString(36).slice(2)}`;
      const Clients = oauthAdapter(store, { unusedTtlS: 60, maxUnused: 2, signInS: 60 });
      const clients = new Clients('Client');
      const interactions = new Clients('Interaction');
      const ids = ['a', 'b', 'c'].map((x) => `${idPrefix}-${x}`);
      for (const id of ids.slice(0, 2)) {
        await clients.upsert(id, { client_id: id }, 0);
        await interactions.upsert(`${id}-i`, { params: { client_id: id } }, 60);
      }
      // The library answers 201 with c's client_id: it must be there to be used.
      await clients.upsert(ids[2]!, { client_id: ids[2]! }, 0);
      expect(await Promise.all(ids.map(async (id) => (await clients.find(id)) !== undefined))).toEqual([
        true,
        true,
        true,
      ]);
    });

    it('keeps a client whose grant is being saved when another host pushes it out meanwhile', async () => {
      const idPrefix = `raced-${Math.random().toString(36).slice(2)}`;
      const lifetime = { unusedTtlS: 60, maxUnused: 1, signInS: 60 };
      const OtherHost = oauthAdapter(store, lifetime);
      // This host's store: another host registers a client just as this one takes c off the list.
      const raced: OAuthStore = Object.assign(Object.create(store) as OAuthStore, {
        dismiss: async (list: string, member: string) => {
          await new OtherHost('Client').upsert(`${idPrefix}-d`, { client_id: `${idPrefix}-d` }, 0);
          await store.dismiss(list, member);
        },
      });
      const Clients = oauthAdapter(raced, lifetime);
      const clients = new Clients('Client');
      await clients.upsert(`${idPrefix}-c`, { client_id: `${idPrefix}-c` }, 0);
      await new Clients('Grant').upsert(`${idPrefix}-g`, { clientId: `${idPrefix}-c`, accountId: 'k1' }, 600);
      expect(await clients.find(`${idPrefix}-c`)).toBeDefined();
      expect(await clients.find(`${idPrefix}-d`)).toBeDefined();
    });

    it('keeps a pushed-out record that has no lifetime, as the in-process store keeps a never-expiring one', async () => {
      const list = `nolife-${Math.random().toString(36).slice(2)}`;
      await store.put(`${list}:rec:x`, 'kept', undefined);
      await store.put(`${list}:rec:y`, 'short', 30);
      await store.admit(list, 'x', 1, 60, { record: `${list}:rec:` });
      // x pushed out, its record kept (no lifetime); then y pushed out, its record deleted.
      expect(await store.admit(list, 'y', 1, 60, { record: `${list}:rec:` })).toEqual([]);
      expect(await store.admit(list, 'z', 0, 60, { record: `${list}:rec:` })).toEqual(['y']);
      expect(await store.get(`${list}:rec:x`)).toEqual({ value: 'kept', consumedAt: null });
      expect(await store.get(`${list}:rec:y`)).toBeUndefined();
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

  describe('OAuth store on Redis: consume', () => {
    it('never marks a record deleted while it was being marked (a raced code whose grant was revoked)', async () => {
      const redis = cache!.shared.redis;
      const store = new RedisOAuthStore(redis, `${prefix}consume:`);
      await store.put('code', 'v', 60);
      // Sent on one connection in this order: the consume's reading, the delete, then whatever
      // the consume sends once it has read (a mark set then is a mark on a deleted record).
      const consuming = store.consume('code', 1);
      await store.del(['code']);
      await consuming;
      expect(await redis.exists(`${prefix}consume:code`, `${prefix}consume:code:consumed`)).toBe(0);
      expect(await store.consume('code', 2)).toBe(false);
    });
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
