import { createServer as createHttpServer } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrList } from '../../../contracts/setting-lists.ts';
import { selfSignedCert } from '../../../test/webhooks-receiver.ts';
import { STRICT_POLICY } from '../../shared/ssrf/address-policy.ts';
import { clientDocumentFetchAllowed, guardedFetch, type OutboundPolicy } from './client-document.ts';
import { createProvider, type OAuthProvider, redirectUriRefusal } from './provider.ts';
import { loadSecrets } from './signing-keys.ts';
import { MemoryOAuthStore } from './store.ts';

const resolver = (table: Record<string, string[]>) => async (host: string) => table[host] ?? [];
const strict = (resolve: OutboundPolicy['resolve']): OutboundPolicy => ({
  addresses: STRICT_POLICY,
  resolve,
});

describe('which client ID metadata documents the server fetches', () => {
  it('fetches from public addresses only, by the webhook sender address policy', async () => {
    const policy = strict(
      resolver({
        'host.example': ['93.184.216.34'],
        'inside.example': ['10.0.0.7'],
        'mixed.example': ['93.184.216.34', '127.0.0.1'],
        'v6.example': ['2606:2800:220:1:248:1893:25c8:1946'],
        'compat.example': ['::a00:1'],
        'nat64.example': ['64:ff9b::a9fe:a9fe'],
      }),
    );
    expect(await clientDocumentFetchAllowed('https://host.example/client.json', policy)).toBe(true);
    expect(await clientDocumentFetchAllowed('https://v6.example/client.json', policy)).toBe(true);
    for (const refused of [
      'https://inside.example/client.json',
      'https://mixed.example/client.json',
      'https://unknown.example/client.json',
      'https://127.0.0.1/client.json',
      'https://[::1]/client.json',
      'https://169.254.169.254/latest',
      'https://[::ffff:10.0.0.1]/c.json',
      // IPv4-compatible ::10.0.0.1: ipaddr.js classes it unicast; the shared policy reads the IPv4 inside.
      'https://[::a00:1]/c.json',
      'https://[::10.0.0.1]/c.json',
      'https://compat.example/c.json',
      'https://nat64.example/c.json',
      'https://[2002:a00:1::]/c.json',
      'not a url',
    ]) {
      expect(await clientDocumentFetchAllowed(refused, policy), refused).toBe(false);
    }
  });
});

describe('the provider fetches a client ID metadata document only from an address that passed the check', () => {
  const tls = selfSignedCert();
  let server: Server;
  let port: number;
  let connections = 0;
  const clientId = () => `https://localhost:${port}/client.json`;

  beforeAll(async () => {
    server = createServer({ key: tls.key, cert: tls.cert }, (_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          client_id: clientId(),
          client_name: 'document host',
          redirect_uris: ['http://127.0.0.1:9/callback'],
          token_endpoint_auth_method: 'none',
        }),
      );
    });
    server.on('connection', () => {
      connections++;
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  const built: OAuthProvider[] = [];
  afterAll(async () => {
    await Promise.all(built.map((b) => b.close()));
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const provider = async (outbound: OutboundPolicy) => {
    const store = new MemoryOAuthStore();
    const b = createProvider({
      issuer: 'http://127.0.0.1:1',
      resource: 'http://127.0.0.1:1/mcp/signin',
      store,
      secrets: await loadSecrets(store, {}),
      ttl: { accessTokenS: 60, refreshTokenS: 60, codeS: 60, interactionS: 60 },
      keyActive: async () => true,
      outbound,
      outboundTls: { ca: tls.cert },
    });
    built.push(b);
    return b.provider;
  };

  it('dials the address it checked (the fetch goes through the guarded agent)', async () => {
    const p = await provider({
      addresses: { allow: parseCidrList('127.0.0.1/32') },
      resolve: async () => ['127.0.0.1'],
    });
    const client = await p.Client.find(clientId());
    expect(client?.redirectUris).toEqual(['http://127.0.0.1:9/callback']);
  });

  it('closes its agent when the provider stops: the kept-alive socket ends, no fetch after', async () => {
    const outbound = guardedFetch(
      { addresses: { allow: parseCidrList('127.0.0.1/32') }, resolve: async () => ['127.0.0.1'] },
      { ca: tls.cert },
    );
    const response = await outbound.fetch(clientId());
    expect(response.status).toBe(200);
    await response.text();
    const open = await new Promise<number>((resolve, reject) =>
      server.getConnections((err, n) => (err ? reject(err) : resolve(n))),
    );
    expect(open).toBeGreaterThan(0);
    await outbound.close();
    await outbound.close(); // twice is fine
    await expect(outbound.fetch(clientId())).rejects.toThrow();
    await expect
      .poll(
        () =>
          new Promise<number>((resolve, reject) =>
            server.getConnections((err, n) => (err ? reject(err) : resolve(n))),
          ),
      )
      .toBe(0);
  });

  it('never connects when the name rebinds to an internal address after the check (DNS rebinding)', async () => {
    let calls = 0;
    // Public when allowFetch checks it, loopback when the fetch resolves it again.
    const rebinding = async () => (calls++ === 0 ? ['93.184.216.34'] : ['127.0.0.1']);
    const p = await provider(strict(rebinding));
    const before = connections;
    const err = (await p.Client.find(clientId().replace('client.json', 'other.json')).catch((e) => e)) as {
      error_description?: string;
      cause?: { cause?: { code?: string } };
    };
    expect(err.error_description).toBe('client_id metadata document fetch failed');
    expect(err.cause?.cause?.code).toBe('ERR_SSRF_FORBIDDEN');
    expect(calls).toBe(2);
    expect(connections).toBe(before);
  });

  it('refuses at registration a plain-http redirect URI that is not on a loopback host', async () => {
    expect(redirectUriRefusal('http://evil.example/cb')).toMatch(/https/);
    expect(redirectUriRefusal('http://127.0.0.2/cb')).toMatch(/loopback/);
    for (const ok of [
      'https://host.example/cb',
      'http://127.0.0.1:8/cb',
      'http://[::1]:8/cb',
      'http://localhost/cb',
    ]) {
      expect(redirectUriRefusal(ok), ok).toBeNull();
    }
    const p = await provider(strict(async () => []));
    const http = createHttpServer(p.callback());
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    try {
      const register = (redirect: string) =>
        fetch(`${base}/oauth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            redirect_uris: [redirect],
            token_endpoint_auth_method: 'none',
            scope: 'mcp',
          }),
        });
      const refused = await register('http://evil.example/cb');
      expect(refused.status).toBe(400);
      expect(await refused.json()).toMatchObject({
        error: 'invalid_redirect_uri',
        error_description: expect.stringMatching(/must use https/),
      });
      for (const ok of [
        'https://host.example/cb',
        'http://127.0.0.1:8/cb',
        'http://[::1]:8/cb',
        'http://localhost:8/cb',
      ]) {
        expect((await register(ok)).status, ok).toBe(201);
      }
    } finally {
      await new Promise<void>((resolve) => http.close(() => resolve()));
    }
  });
});
