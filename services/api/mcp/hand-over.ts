import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Caller } from '../../metering/caller.ts';

/**
 * Hands the raw request to an SDK transport (a session's or a one-shot one): the headers Fastify
 * set so far (CORS) go along, and the caller rides as the transport's auth info. A throw before
 * the answer started is answered as JSON-RPC's internal error.
 */
export async function handOver(
  transport: StreamableHTTPServerTransport,
  request: FastifyRequest,
  reply: FastifyReply,
  caller: Caller | undefined,
  failure: string,
): Promise<FastifyReply> {
  reply.hijack();
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) reply.raw.setHeader(name, value as string | string[] | number);
  }
  const raw = request.raw as typeof request.raw & { auth?: AuthInfo };
  raw.auth = authInfo(request, caller);
  try {
    await transport.handleRequest(raw, reply.raw, request.body);
  } catch (err) {
    request.log.error({ err }, failure);
    if (!reply.raw.headersSent) {
      reply.raw.writeHead(500, { 'content-type': 'application/json' });
      reply.raw.end(
        JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id: null }),
      );
    }
  }
  return reply;
}

/**
 * The caller as the SDK's auth info: its tool handlers read the client address and the caller the
 * caller hook resolved (or the key it refused) from it.
 */
export function authInfo(request: FastifyRequest, caller: Caller | undefined): AuthInfo {
  const known = caller ?? request.caller ?? undefined;
  const refused = request.callerRefused ?? undefined;
  return {
    token: '',
    clientId: 'mcp',
    scopes: [],
    extra: {
      clientAddress: request.ip,
      ...(known ? { caller: known } : {}),
      ...(refused ? { refused } : {}),
    },
  };
}
