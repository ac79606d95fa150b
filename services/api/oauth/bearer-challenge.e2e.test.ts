import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { freePort } from '../../../test/ports.ts';
import { rawRequest } from '../../../test/raw-http.ts';

/**
 * /mcp/signin is an OAuth protected resource: every refusal of its Bearer credential carries the
 * RFC 6750 challenge with RFC 9728's resource_metadata, the 400 of an Authorization field sent
 * twice (RFC 6750 §3.1 invalid_request: more than one way of sending the token) included.
 */

describe('the Bearer challenge of /mcp/signin', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  let port: number;
  let base: string;

  beforeAll(async () => {
    port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = await startKeyedServer({ cache: new MemoryCache(), port, env: { PUBLIC_BASE_URL: base } });
  });
  afterAll(async () => {
    await server?.close();
  });

  /** A raw socket's request: fetch() cannot send a header field twice. */
  const post = (authorization: string[]) =>
    rawRequest(`${base}/mcp/signin`, {
      headers: {
        authorization,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    });

  it('Authorization sent twice: 400 with the challenge, error="invalid_request"', async () => {
    const res = await post(['Bearer first-token', 'Bearer second-token']);
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({
      jsonrpc: '2.0',
      error: {
        message: 'Authorization was sent more than once; send it exactly once',
        data: { code: 'BAD_REQUEST' },
      },
    });
    expect(res.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/signin", scope="mcp", error="invalid_request", error_description="Authorization was sent more than once; send it exactly once"`,
    );
  });

  it('a token that is no live one: 401 with error="invalid_token"; none: 401 with no error code', async () => {
    const refused = await post(['Bearer not-a-token']);
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toMatch(
      /^Bearer resource_metadata="[^"]+", scope="mcp", error="invalid_token"/,
    );
    const none = await post([]);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/signin", scope="mcp"`,
    );
  });
});
