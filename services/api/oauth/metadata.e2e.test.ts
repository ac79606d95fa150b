import { createHash, randomBytes } from 'node:crypto';
import { auth, discoverAuthorizationServerMetadata } from '@modelcontextprotocol/sdk/client/auth.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MemoryHost } from '../../../test/oauth-host.ts';
import { freePort } from '../../../test/ports.ts';
import { startTestService, type TestService } from '../../../test/service-harness.ts';

/**
 * What the authorization server says of itself and of a client, as a plain OAuth server (no
 * OpenID Connect: openid is refused, no ID token is issued): its RFC 8414 metadata, served at
 * RFC 8414's well-known path alone (not at OpenID Connect Discovery's, which names an OpenID
 * provider), carries no member OpenID Connect Discovery defines and none about DPoP (its
 * tokens are Bearer tokens, /mcp/signin checks no proof), and names how a client authenticates at
 * the revocation endpoint (left out, RFC 8414 reads it as client_secret_basic alone); a
 * registered client (RFC 7591/7592) is answered without OpenID registration defaults; an
 * invalid_scope sent back to the host carries the scope asked for, and no empty `scope=`.
 */
const OPENID_DISCOVERY_MEMBERS = [
  'claims_parameter_supported',
  'claims_supported',
  'claim_types_supported',
  'subject_types_supported',
  'id_token_signing_alg_values_supported',
  'request_uri_parameter_supported',
  'userinfo_endpoint',
  'end_session_endpoint',
];
const OPENID_CLIENT_MEMBERS = ['id_token_signed_response_alg', 'require_auth_time', 'subject_type'];
const REDIRECT = 'http://127.0.0.1:9/callback';

let running: TestService;
let url: string;
let client: Record<string, unknown>;

beforeAll(async () => {
  running = await startTestService(['api']);
  url = running.service.url;
  const registered = await fetch(`${url}/oauth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      client_name: 'metadata host',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }),
  });
  expect(registered.status).toBe(201);
  client = (await registered.json()) as Record<string, unknown>;
});
afterAll(async () => {
  await running?.stop();
});

describe('OAuth metadata of a server that is not an OpenID provider', () => {
  it('RFC 8414 metadata: no OpenID Discovery or DPoP members, revocation authentication named', async () => {
    const path = '/.well-known/oauth-authorization-server';
    const metadata = (await (await fetch(`${url}${path}`)).json()) as Record<string, unknown>;
    expect(metadata.issuer, path).toBe(url);
    expect(metadata.response_types_supported, path).toEqual(['code']);
    expect(metadata.code_challenge_methods_supported, path).toEqual(['S256']);
    expect(metadata.scopes_supported, path).not.toContain('openid');
    for (const member of [...OPENID_DISCOVERY_MEMBERS, 'dpop_signing_alg_values_supported']) {
      expect(metadata, `${path} ${member}`).not.toHaveProperty(member);
    }
    expect(metadata.revocation_endpoint, path).toBe(`${url}/oauth/revoke`);
    expect(metadata.revocation_endpoint_auth_methods_supported, path).toContain('none');
    expect(metadata.revocation_endpoint_auth_methods_supported, path).toEqual(
      metadata.token_endpoint_auth_methods_supported,
    );
    expect(metadata.revocation_endpoint_auth_signing_alg_values_supported, path).toEqual(
      metadata.token_endpoint_auth_signing_alg_values_supported,
    );
  });

  it('serves no OpenID provider configuration: the RFC 8414 document is the one a client finds', async () => {
    // An SDK client, as a host discovers the authorization server: RFC 8414 first, OpenID Connect
    // Discovery only if that fails; it finds the RFC 8414 document.
    const found = await discoverAuthorizationServerMetadata(url);
    expect(found?.issuer).toBe(url);
    expect(found).not.toHaveProperty('subject_types_supported');
    const openid = await fetch(`${url}/.well-known/openid-configuration`);
    expect(openid.status).toBe(404);
    expect(((await openid.json()) as { code: string }).code).toBe('NOT_FOUND');
  });

  it('a registered client is answered without OpenID registration defaults or DPoP binding, read back too', async () => {
    const read = await fetch(String(client.registration_client_uri), {
      headers: { authorization: `Bearer ${String(client.registration_access_token)}` },
    });
    expect(read.status).toBe(200);
    const readBack = (await read.json()) as Record<string, unknown>;
    for (const [what, answer] of [
      ['registration', client],
      ['read back', readBack],
    ] as const) {
      expect(answer.client_id, what).toBe(client.client_id);
      expect(answer.token_endpoint_auth_method, what).toBe('none');
      for (const member of [...OPENID_CLIENT_MEMBERS, 'dpop_bound_access_tokens']) {
        expect(answer, `${what} ${member}`).not.toHaveProperty(member);
      }
    }
  });

  it('a client that names no authentication method is public (none) and told no secret; a confidential one keeps its', async () => {
    const register = async (extra: Record<string, unknown>) => {
      const res = await fetch(`${url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ client_name: 'auth method host', redirect_uris: [REDIRECT], ...extra }),
      });
      expect(res.status).toBe(201);
      return (await res.json()) as Record<string, unknown>;
    };
    const token = (auth: Record<string, string>) =>
      fetch(`${url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'none-issued', ...auth }),
      }).then(async (res) => ((await res.json()) as { error: string }).error);

    const unnamed = await register({});
    expect(unnamed.token_endpoint_auth_method).toBe('none');
    expect(unnamed).not.toHaveProperty('client_secret');
    expect(unnamed).not.toHaveProperty('client_secret_expires_at');
    const read = await fetch(String(unnamed.registration_client_uri), {
      headers: { authorization: `Bearer ${String(unnamed.registration_access_token)}` },
    });
    expect(await read.json()).not.toHaveProperty('client_secret');
    // It authenticates as what it was told: client_id alone gets past client authentication.
    expect(await token({ client_id: String(unnamed.client_id) })).toBe('invalid_grant');

    const confidential = await register({ token_endpoint_auth_method: 'client_secret_post' });
    expect(confidential.client_secret).toEqual(expect.any(String));
    expect(confidential.client_secret_expires_at).toBe(0);
    const secret = {
      client_id: String(confidential.client_id),
      client_secret: String(confidential.client_secret),
    };
    expect(await token(secret)).toBe('invalid_grant');
  });

  it('invalid_scope goes back with the scope asked for, and without a scope parameter when none was', async () => {
    const challenge = createHash('sha256').update(randomBytes(32).toString('base64url')).digest('base64url');
    const refusal = async (scope: string | undefined) => {
      const to = new URL(`${url}/oauth/authorize`);
      to.searchParams.set('response_type', 'code');
      to.searchParams.set('client_id', String(client.client_id));
      to.searchParams.set('redirect_uri', REDIRECT);
      to.searchParams.set('code_challenge', challenge);
      to.searchParams.set('code_challenge_method', 'S256');
      to.searchParams.set('state', 'st-1');
      if (scope !== undefined) to.searchParams.set('scope', scope);
      const res = await fetch(to, { redirect: 'manual' });
      expect(res.status, String(scope)).toBe(303);
      const back = new URL(res.headers.get('location')!);
      expect(`${back.origin}${back.pathname}`, String(scope)).toBe(REDIRECT);
      expect(back.searchParams.get('error'), String(scope)).toBe('invalid_scope');
      expect(back.searchParams.get('state'), String(scope)).toBe('st-1');
      return back;
    };
    for (const scope of [undefined, '', ' ']) {
      const back = await refusal(scope);
      expect(back.searchParams.has('scope'), JSON.stringify(scope)).toBe(false);
      for (const [name, value] of back.searchParams) expect(value, `${name} is empty`).not.toBe('');
    }
    expect((await refusal('offline_access')).searchParams.get('scope')).toBe('offline_access');
    expect((await refusal('mcp openid')).searchParams.get('scope')).toBe('mcp openid');
  });
});

describe('OAuth metadata of an issuer with a path (OAUTH_ISSUER=<origin>/auth)', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  let base: string;
  beforeAll(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = await startKeyedServer({
      cache: new MemoryCache(),
      port,
      env: { PUBLIC_BASE_URL: base, OAUTH_ISSUER: `${base}/auth` },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('serves its RFC 8414 metadata where the issuer names it (path inserted), where the SDK finds it', async () => {
    const inserted = await fetch(`${base}/.well-known/oauth-authorization-server/auth`);
    expect(inserted.status).toBe(200);
    expect(((await inserted.json()) as { issuer: string }).issuer).toBe(`${base}/auth`);
    // A path the issuer does not name is no metadata.
    expect((await fetch(`${base}/.well-known/oauth-authorization-server/other`)).status).toBe(404);

    // The SDK client goes from /mcp/signin's 401 to a registration and an authorization URL.
    const host = new MemoryHost(REDIRECT, 'issuer path host');
    expect(await auth(host, { serverUrl: new URL(`${base}/mcp/signin`) })).toBe('REDIRECT');
    expect(host.info?.client_id).toEqual(expect.any(String));
    expect(`${host.authorizationUrl?.origin}${host.authorizationUrl?.pathname}`).toBe(
      `${base}/oauth/authorize`,
    );
  });
});
