import { randomUUID } from 'node:crypto';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createSiweMessage } from 'viem/siwe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../adapters/cache/redis.ts';
import { siweOrigins } from '../services/api/keys/siwe-check.ts';
import { startKeyedServer } from './keyed-harness.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from './redis-probe.ts';

const run = await shouldRunRedisSuite('SIWE sign-in suite');
const PREFIX = `test:siwe:${randomUUID()}:`;
const DOMAIN = 'signals.test:8443';
const MINUTE = 60_000;

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe.runIf(run)('POST /api/keys: free sign-in with Sign-In with Ethereum', () => {
  let cache: RedisCache;
  let server: Server;

  beforeAll(async () => {
    cache = await connectRedisCache({ url: REDIS_URL, prefix: PREFIX });
    // This suite signs in a dozen wallets from one address: the free-key budget per network has
    // its own suite (free-key-budget.e2e.test.ts).
    server = await startKeyedServer({
      cache,
      env: { SIWE_DOMAIN: DOMAIN, FREE_KEYS_PER_ADDRESS_PER_DAY: '100' },
    });
  });
  afterAll(async () => {
    await server?.close();
    await cache?.close();
    await wipePrefix(PREFIX);
  });

  const nonce = async (): Promise<string> => {
    const res = await fetch(`${server.url}/api/keys/nonce`);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const body = (await res.json()) as { domain: string; nonce: string };
    expect(body.domain).toBe(DOMAIN);
    return body.nonce;
  };

  const signed = async (
    account = privateKeyToAccount(generatePrivateKey()),
    overrides: {
      domain?: string;
      uri?: string;
      chainId?: number;
      nonce?: string;
      expirationTime?: Date;
      signer?: ReturnType<typeof privateKeyToAccount>;
    } = {},
  ) => {
    const message = createSiweMessage({
      domain: overrides.domain ?? DOMAIN,
      address: account.address,
      statement: 'Sign in to get a free API key.',
      uri: overrides.uri ?? `https://${DOMAIN}/`,
      version: '1',
      chainId: overrides.chainId ?? 8453,
      nonce: overrides.nonce ?? (await nonce()),
      issuedAt: new Date(),
      expirationTime: overrides.expirationTime ?? new Date(Date.now() + 5 * MINUTE),
    });
    const signature = await (overrides.signer ?? account).signMessage({ message });
    return { account, body: { message, signature } };
  };

  const post = async (body: unknown) => {
    const res = await fetch(`${server.url}/api/keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const { _service, ...answer } = (await res.json()) as Record<string, string> & {
      key: string;
      _service?: unknown;
    };
    // A refusal carries the caller's `_service` like every per-caller answer (contract §8).
    if (res.status >= 400)
      expect(_service, 'a refusal carries _service').toMatchObject({ auth: { tier: 'free' } });
    return { status: res.status, body: answer };
  };

  it('issues one free key to a signed-in wallet, usable at once; the nonce is single-use', async () => {
    const { account, body } = await signed();
    const first = await post(body);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({
      plan: 'free',
      owner: account.address,
      limits: { monthly: 200, daily: 100 },
    });
    expect(first.body.key).toMatch(/^sk_live_[A-Za-z0-9_-]{43}$/);
    const lookup = await server.channel.keys.resolve(first.body.key);
    expect(lookup).toMatchObject({
      status: 'active',
      record: { plan: 'free', via: 'siwe', owner: account.address },
    });
    // Only the hash is on the log.
    expect(JSON.stringify(await server.store.readAll())).not.toContain(first.body.key);

    expect(await post(body)).toEqual({
      status: 401,
      body: {
        code: 'SIWE_NONCE_INVALID',
        message: 'unknown, expired or already used nonce; get a new one from GET /api/keys/nonce',
      },
    });
    const again = await signed(account);
    expect(await post(again.body)).toEqual({
      status: 409,
      body: { code: 'KEY_ALREADY_ISSUED', message: `address ${account.address} already has its free key` },
    });
  });

  it('a replayed message racing itself is served once', async () => {
    const { body } = await signed();
    const results = await Promise.all(Array.from({ length: 10 }, () => post(body)));
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.filter((r) => r.status === 401 && r.body.code === 'SIWE_NONCE_INVALID')).toHaveLength(9);
  });

  it('one address signing in concurrently with several nonces gets one key', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const bodies = await Promise.all(Array.from({ length: 5 }, async () => (await signed(account)).body));
    const results = await Promise.all(bodies.map(post));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
  });

  it('refuses another domain', async () => {
    const { body } = await signed(undefined, { domain: 'evil.example' });
    expect(await post(body)).toEqual({
      status: 401,
      body: {
        code: 'SIWE_DOMAIN_MISMATCH',
        message: `the message is for evil.example, this service signs in ${DOMAIN}`,
      },
    });
  });

  it("refuses a message whose uri is not the service's origin, and leaves the nonce usable", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const n = await nonce();
    for (const uri of ['https://evil.example/', `http://${DOMAIN}/`, `https://${DOMAIN}.evil.example/`]) {
      const { body } = await signed(account, { nonce: n, uri });
      expect(await post(body)).toEqual({
        status: 400,
        body: {
          code: 'INVALID_SIWE_MESSAGE',
          message: `the message's uri is ${uri}; this service signs in at https://${DOMAIN}`,
        },
      });
    }
    // Any path on the service's own origin is the service.
    const { body } = await signed(account, { nonce: n, uri: `https://${DOMAIN}/oauth/interaction/x` });
    expect((await post(body)).status).toBe(201);
  });

  it('takes a message for any chain: the signature is recovered locally, and a wallet signs on its own chain', async () => {
    for (const chainId of [1, 56, 84532])
      expect((await post((await signed(undefined, { chainId })).body)).status).toBe(201);
  });

  it("takes the uri's origin from PUBLIC_BASE_URL when the domain is its host, else https (http on loopback)", () => {
    expect(siweOrigins('signals.example', 'https://signals.example/base/')).toEqual([
      'https://signals.example',
    ]);
    expect(siweOrigins('10.0.0.5:8080', 'http://10.0.0.5:8080')).toEqual(['http://10.0.0.5:8080']);
    expect(siweOrigins('signals.test:8443', 'https://other.example')).toEqual(['https://signals.test:8443']);
    expect(siweOrigins('signals.test:8443')).toEqual(['https://signals.test:8443']);
    expect(siweOrigins('localhost:8080')).toEqual(['https://localhost:8080', 'http://localhost:8080']);
  });

  it('refuses a nonce it never issued', async () => {
    const { body } = await signed(undefined, { nonce: 'abcdefgh12345678' });
    expect(await post(body)).toMatchObject({ status: 401, body: { code: 'SIWE_NONCE_INVALID' } });
  });

  it('hands out unpredictable nonces: none is the one before shifted by a character', async () => {
    const nonces: string[] = [];
    for (let i = 0; i < 20; i++) nonces.push(await nonce());
    for (const n of nonces) expect(n).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(nonces).size).toBe(nonces.length);
    // viem's generateSiweNonce gave `99f1b584…a74dc` then `9f1b5848…a74dcb`: a window sliding
    // over one Math.random buffer. No 16-character piece of one nonce may appear in another.
    for (const [i, a] of nonces.entries()) {
      for (const b of nonces.slice(i + 1)) {
        for (let at = 0; at + 16 <= a.length; at++) expect(b).not.toContain(a.slice(at, at + 16));
      }
    }
  });

  it('refuses an expired message', async () => {
    const { body } = await signed(undefined, { expirationTime: new Date(Date.now() - MINUTE) });
    expect(await post(body)).toEqual({
      status: 401,
      body: { code: 'SIWE_EXPIRED', message: 'the message expired; sign a new one' },
    });
  });

  it('refuses a signature by another wallet, and leaves the nonce usable by its owner', async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const n = await nonce();
    const forged = await signed(account, { nonce: n, signer: privateKeyToAccount(generatePrivateKey()) });
    expect(await post(forged.body)).toEqual({
      status: 401,
      body: {
        code: 'SIWE_SIGNATURE_INVALID',
        message: 'the signature was not made by the address in the message',
      },
    });
    const genuine = await signed(account, { nonce: n });
    expect((await post(genuine.body)).status).toBe(201);
  });

  it('refuses a foreign origin however the path is spelled (/api/%6beys is /api/keys)', async () => {
    for (const path of ['/api/keys/nonce', '/api/%6beys/nonce', '/api/k%65ys/nonce']) {
      const res = await fetch(`${server.url}${path}`, { headers: { origin: 'https://elsewhere.example' } });
      expect({ path, status: res.status }).toEqual({ path, status: 403 });
      expect(await res.json()).toMatchObject({ code: 'FORBIDDEN_ORIGIN' });
    }
  });

  it('400 INVALID_FIELD naming the field for a body that is not a sign-in (README: Error codes)', async () => {
    expect(await post({ message: 'hello' })).toEqual({
      status: 400,
      body: {
        code: 'INVALID_FIELD',
        message: 'signature is required: it must be a string',
        field: 'signature',
      },
    });
    expect(await post({})).toEqual({
      status: 400,
      body: {
        code: 'INVALID_FIELD',
        message: 'message is required: it must be a string of 1 to 4096 characters',
        field: 'message',
      },
    });
    expect(await post({ message: 'hello', signature: '0x00', colour: 'blue' })).toEqual({
      status: 400,
      body: { code: 'INVALID_FIELD', message: 'unknown field "colour"', field: 'colour' },
    });
    expect(await post([1])).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'body' } });
    expect(await post({ message: 'hello', signature: '0x00' })).toMatchObject({
      status: 400,
      body: { code: 'INVALID_SIWE_MESSAGE' },
    });
  });
});
