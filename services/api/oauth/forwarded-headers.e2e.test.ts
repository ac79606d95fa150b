import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { freePort } from '../../../test/ports.ts';

/**
 * The sign-in reads X-Forwarded-Proto and X-Forwarded-Host only from a peer TRUST_PROXY believes,
 * as the request's address does (Fastify's trust test): with TRUST_PROXY naming another address,
 * a client that sends them itself still meets the origin it connected to. The library names its
 * endpoints after the origin it reads, so its metadata shows which one it believed.
 */
describe.each([
  { trustProxy: '10.9.9.9', believed: false },
  { trustProxy: '127.0.0.1', believed: true },
])(
  'OAuth metadata with TRUST_PROXY=$trustProxy, asked from 127.0.0.1 with forwarded headers',
  ({ trustProxy, believed }) => {
    let server: Awaited<ReturnType<typeof startKeyedServer>>;
    let base: string;

    beforeAll(async () => {
      const port = await freePort();
      base = `http://127.0.0.1:${port}`;
      server = await startKeyedServer({ cache: new MemoryCache(), port, env: { TRUST_PROXY: trustProxy } });
    });
    afterAll(async () => {
      await server?.close();
    });

    it(
      believed ? 'believes them from the listed proxy' : 'does not believe them from a peer it does not list',
      async () => {
        const res = await fetch(`${base}/.well-known/oauth-authorization-server`, {
          headers: { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'forged.example' },
        });
        expect(res.status).toBe(200);
        const metadata = (await res.json()) as { authorization_endpoint: string; token_endpoint: string };
        const origin = believed ? 'https://forged.example' : base;
        expect(new URL(metadata.token_endpoint).origin).toBe(origin);
        expect(new URL(metadata.authorization_endpoint).origin).toBe(origin);
      },
    );

    it('without them, names the origin it was asked at', async () => {
      const metadata = (await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json()) as {
        token_endpoint: string;
      };
      expect(new URL(metadata.token_endpoint).origin).toBe(base);
    });
  },
);
