import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createSiweMessage } from 'viem/siwe';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import type { Cache } from '../adapters/cache/port.ts';
import { connectRedisCache } from '../adapters/cache/redis.ts';
import { walletStream } from '../services/api/keys/free-key.ts';
import { revokeKey } from '../services/keys/key-commands.ts';
import { startKeyedServer } from './keyed-harness.ts';
import { freePort } from './ports.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from './redis-probe.ts';

/**
 * Free keys per client network and UTC day (FREE_KEYS_PER_ADDRESS_PER_DAY, default 3), counted in
 * the shared cache (Redis here): a wallet is a fresh private key, so one key per wallet alone let
 * one address mint a key per signature. POST /api/keys and the OAuth consent page's wallet sign-in
 * draw on the same budget. Client networks are told apart by X-Forwarded-For from a trusted proxy
 * (TRUST_PROXY), as the service resolves a caller behind a load balancer; an IPv6 /64 is one network.
 */
const redis = await shouldRunRedisSuite('free-key budget suite on Redis');
const PREFIX = `test:free-key-budget:${randomUUID()}:`;
const MINUTE = 60_000;
const DAY_MS = 86_400_000;

type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Account = ReturnType<typeof privateKeyToAccount>;

/** The fleet's shared cache (Redis, when it answers: see shouldRunRedisSuite), and the embedded box's in-process one. */
const caches: [string, () => Promise<Cache>][] = [
  ...(redis
    ? [
        ['Redis', () => connectRedisCache({ url: REDIS_URL, prefix: PREFIX })] as [
          string,
          () => Promise<Cache>,
        ],
      ]
    : []),
  ['in-process', async () => createMemoryCache()],
];

describe.each(caches)(
  'free keys: a budget per client network and UTC day, on both paths (%s cache)',
  (_name, connect) => {
    let cache: Cache;
    let server: Server;
    let base: string;
    let domain: string;
    let clientId: string;

    beforeAll(async () => {
      cache = await connect();
      const port = await freePort();
      base = `http://127.0.0.1:${port}`;
      domain = `127.0.0.1:${port}`;
      // The default budget (3): no FREE_KEYS_PER_ADDRESS_PER_DAY here.
      server = await startKeyedServer({
        cache,
        port,
        env: { PUBLIC_BASE_URL: base, TRUST_PROXY: '127.0.0.1' },
      });
      const registered = await fetch(`${base}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          client_name: 'budget host',
          redirect_uris: ['http://127.0.0.1:9/callback'],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
          scope: 'mcp',
        }),
      });
      expect(registered.status).toBe(201);
      clientId = ((await registered.json()) as { client_id: string }).client_id;
    });
    afterEach(() => {
      vi.useRealTimers();
    });
    afterAll(async () => {
      await server?.close();
      await cache?.close();
      if (cache?.kind === 'redis') await wipePrefix(PREFIX);
    });

    const message = (account: Account, nonce: string) =>
      createSiweMessage({
        domain,
        address: account.address,
        statement: 'Sign in to get a free API key.',
        uri: `${base}/`,
        version: '1',
        chainId: 8453,
        nonce,
        issuedAt: new Date(),
        expirationTime: new Date(Date.now() + 5 * MINUTE),
      });

    /** A signed POST /api/keys body for `account` (a fresh wallet by default). */
    const signed = async (account: Account = privateKeyToAccount(generatePrivateKey())) => {
      const res = await fetch(`${base}/api/keys/nonce`);
      expect(res.status).toBe(200);
      const { nonce } = (await res.json()) as { nonce: string };
      const text = message(account, nonce);
      return { account, body: { message: text, signature: await account.signMessage({ message: text }) } };
    };

    /** POST /api/keys as a client of network `from` (behind the trusted proxy). */
    const post = async (body: unknown, from: string) => {
      const res = await fetch(`${base}/api/keys`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-forwarded-for': from },
        body: JSON.stringify(body),
      });
      const { _service, ...answer } = (await res.json()) as Record<string, unknown>;
      return { status: res.status, retryAfter: res.headers.get('retry-after'), body: answer };
    };

    /** The consent page's wallet sign-in, as its form posts it, for a fresh interaction. */
    const oauthWallet = async (account: Account, from: string) => {
      const challenge = createHash('sha256')
        .update(randomBytes(32).toString('base64url'))
        .digest('base64url');
      const authorize = new URL(`${base}/oauth/authorize`);
      for (const [name, value] of Object.entries({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: 'http://127.0.0.1:9/callback',
        scope: 'mcp',
        state: randomBytes(8).toString('hex'),
        resource: `${base}/mcp/signin`,
        code_challenge: challenge,
        code_challenge_method: 'S256',
      }))
        authorize.searchParams.set(name, value);
      const started = await fetch(authorize, { redirect: 'manual' });
      expect(started.status).toBe(303);
      const interaction = new URL(started.headers.get('location')!, base).pathname;
      expect(interaction).toMatch(/^\/oauth\/interaction\/[^/]+$/);
      const cookie = started.headers
        .getSetCookie()
        .map((c) => c.split(';')[0])
        .join('; ');
      const nonceRes = await fetch(`${base}${interaction}/nonce`, { headers: { cookie } });
      expect(nonceRes.status).toBe(200);
      const { nonce } = (await nonceRes.json()) as { nonce: string };
      const text = message(account, nonce);
      const res = await fetch(`${base}${interaction}/wallet`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, 'x-forwarded-for': from },
        body: new URLSearchParams({ message: text, signature: await account.signMessage({ message: text }) }),
      });
      return { status: res.status, retryAfter: res.headers.get('retry-after'), page: await res.text() };
    };

    const untilMidnight = (now = Date.now()) => Math.ceil((DAY_MS - (now % DAY_MS)) / 1_000);
    /** Retry-After names the UTC midnight as the server saw the time, between sending and the answer. */
    const expectUntilMidnight = (retryAfter: string | null, sent: number, answered: number) => {
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(untilMidnight(answered));
      expect(Number(retryAfter)).toBeLessThanOrEqual(untilMidnight(sent));
    };

    it('refuses the fourth key from one network (an IPv6 /64) with 429 and Retry-After; another network still gets one', async () => {
      const first: Account[] = [];
      for (const from of ['2001:db8:0:1::1', '2001:db8:0:1::2', '2001:db8:0:1:ffff:ffff:ffff:ffff']) {
        const { account, body } = await signed();
        expect((await post(body, from)).status).toBe(201);
        first.push(account);
      }
      const fourth = await signed();
      const sent = Date.now();
      const refused = await post(fourth.body, '2001:db8:0:1::77');
      const answered = Date.now();
      expect(refused.status).toBe(429);
      expect(refused.body).toEqual({
        code: 'FREE_KEY_LIMIT_REACHED',
        message: expect.stringMatching(
          /^this network has been issued its 3 free keys for today \(UTC\); try again in \d+ s, or use a paid plan$/,
        ),
        retryable: true,
      });
      expectUntilMidnight(refused.retryAfter, sent, answered);
      // Nothing written for the refused wallet.
      expect(await server.store.streamRevision(walletStream(fourth.account.address))).toBeNull();

      // A wallet that has its key is told so, not charged: 409 even with the budget spent.
      expect((await post((await signed(first[0])).body, '2001:db8:0:1::1')).body).toMatchObject({
        code: 'KEY_ALREADY_ISSUED',
      });

      // Another network (the next /64, an IPv4 address) still gets its keys; the refused message's
      // nonce was not spent, so the same signed message is served there.
      expect((await post(fourth.body, '2001:db8:0:2::1')).status).toBe(201);
      expect((await post((await signed()).body, '198.51.100.7')).status).toBe(201);
    });

    it('starts afresh when the UTC day turns', async () => {
      const from = '198.51.100.20';
      for (let i = 0; i < 3; i++) expect((await post((await signed()).body, from)).status).toBe(201);
      expect((await post((await signed()).body, from)).status).toBe(429);
      // The next UTC day, one second in (only Date is faked: the server runs in this process).
      vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
      vi.setSystemTime(Math.floor(Date.now() / DAY_MS + 1) * DAY_MS + 1_000);
      for (let i = 0; i < 3; i++) expect((await post((await signed()).body, from)).status).toBe(201);
      expect((await post((await signed()).body, from)).status).toBe(429);
    });

    it('draws POST /api/keys and the OAuth wallet sign-in from one budget', async () => {
      const from = '203.0.113.9';
      const viaOAuth = privateKeyToAccount(generatePrivateKey());
      const signedIn = await oauthWallet(viaOAuth, from);
      expect(signedIn.status).toBe(200);
      expect(signedIn.page).toContain(viaOAuth.address);
      expect(signedIn.page).toContain('name="key_id"');
      for (let i = 0; i < 2; i++) expect((await post((await signed()).body, from)).status).toBe(201);

      // The budget is spent by both paths: the wallet step refuses a new wallet with its page...
      const sent = Date.now();
      const refused = await oauthWallet(privateKeyToAccount(generatePrivateKey()), from);
      const answered = Date.now();
      expect(refused.status).toBe(429);
      expectUntilMidnight(refused.retryAfter, sent, answered);
      // The refusal is the page's alert (focused on load: services/api/oauth/page.ts).
      expect(refused.page).toMatch(
        /<p class="error" id="consent-error" role="alert"[^>]*>this network has been issued its 3 free keys/,
      );
      expect(refused.page).not.toContain('name="key_id"');
      // ...and POST /api/keys too.
      expect((await post((await signed()).body, from)).body).toMatchObject({
        code: 'FREE_KEY_LIMIT_REACHED',
      });

      // A wallet with its key signs in on the page as before, charged nothing.
      const again = await oauthWallet(viaOAuth, from);
      expect(again.status).toBe(200);
      expect(again.page).toContain('name="key_id"');
    });

    it('shows a wallet whose key was revoked without keys on the page, and charges it nothing', async () => {
      const from = '203.0.113.77';
      const account = privateKeyToAccount(generatePrivateKey());
      const issued = await post((await signed(account)).body, from);
      expect(issued.status).toBe(201);
      const revoked = await revokeKey(
        server.store,
        walletStream(account.address),
        String(issued.body.key_id),
        'test',
      );
      await server.channel.registry.waitFor(revoked);
      for (let i = 0; i < 3; i++) {
        const page = await oauthWallet(account, from);
        expect(page.status).toBe(200);
        expect(page.page).toContain(account.address);
        expect(page.page).not.toContain('name="key_id"');
      }
      // One key issued from this network: two left.
      for (let i = 0; i < 2; i++) expect((await post((await signed()).body, from)).status).toBe(201);
      expect((await post((await signed()).body, from)).status).toBe(429);
    });
  },
);
