import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { freePort } from '../../../test/ports.ts';

/**
 * /mcp/signin is an OAuth protected resource: every refusal of its Bearer credential carries the
 * RFC 6750 challenge with RFC 9728's resource_metadata, the 400 of an Authorization field sent
 * twice (RFC 6750 §3.1 invalid_request: more than one way of sending the token) included.
 */

/** One HTTP/1.1 exchange on a raw socket: fetch() cannot send a header field twice. */
function exchange(
  port: number,
  request: string,
): Promise<{ status: number; headers: Map<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.end(request));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const [head = '', body = ''] = text.split('\r\n\r\n');
      const [status = '', ...lines] = head.split('\r\n');
      const headers = new Map<string, string>();
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
      }
      resolve({ status: Number(status.split(' ')[1]), headers, body });
    });
  });
}

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

  const post = (authorization: string[]) => {
    const body = '{"jsonrpc":"2.0","id":1,"method":"ping"}';
    return exchange(
      port,
      `POST /mcp/signin HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${authorization.map((a) => `Authorization: ${a}\r\n`).join('')}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
  };

  it('Authorization sent twice: 400 with the challenge, error="invalid_request"', async () => {
    const res = await post(['Bearer first-token', 'Bearer second-token']);
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toMatchObject({
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
