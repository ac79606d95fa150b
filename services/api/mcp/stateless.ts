import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CacheHint, McpHttpHandler, Server, ServerContext } from '@modelcontextprotocol/server';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Caller } from '../../metering/caller.ts';
import { authInfo, handOver } from './hand-over.ts';
import { RESOURCE_TEMPLATES, RESOURCES, readResource } from './resources.ts';
import {
  createMcpServer,
  cursorOf,
  refuseCursor,
  SERVER_CAPABILITIES,
  SERVER_INFO,
  SERVER_INSTRUCTIONS,
  SIGNIN_INSTRUCTIONS,
} from './server.ts';
import { ChannelError, callTool, MCP_PAYMENT_META, type ToolCallDeps } from './tool-call.ts';

/**
 * /mcp without a session and not initialize: what the session path refused with
 * "Mcp-Session-Id header is required". Two kinds, told apart by the maintained SDK's own
 * classifier (`isLegacyRequest`): a 2025-era one-shot `tools/call` (what the peer's documentation
 * tells integrators to send) is answered by the 1.x server over a session-less transport, as
 * JSON; a 2026-07-28 request (per-request envelope, `server/discover`, `Mcp-Method`/`Mcp-Name`
 * headers checked against the body, `ttlMs`/`cacheScope` on lists) by the 2.x SDK's
 * `createMcpHandler`. The session handshake in plugin.ts is untouched. Same tools, same caller
 * rules: every call goes through callTool.
 */

/** The tool list changes only with a deployment: clients may keep it for five minutes, shared. */
const TOOLS_CACHE: CacheHint = { ttlMs: 300_000, cacheScope: 'public' };

/** The 2.x SDK, loaded on the first session-less request: most processes never see one, and it costs ~0.3 s to load. */
type ModernSdk = typeof import('@modelcontextprotocol/server');

function createModernServer(sdk: ModernSdk, deps: ToolCallDeps, instructions: string): Server {
  const { Server, ProtocolError } = sdk;
  const server = new Server(SERVER_INFO, {
    capabilities: SERVER_CAPABILITIES,
    instructions,
    cacheHints: { 'tools/list': TOOLS_CACHE, 'server/discover': TOOLS_CACHE },
  });
  // Every list is one page: a cursor is refused -32602, as on the 1.x server (refuseCursor).
  const pageOne = (method: string, cursor: unknown) => {
    try {
      refuseCursor(method, cursor);
    } catch (err) {
      if (err instanceof ChannelError) throw new ProtocolError(err.code, err.message);
      throw err;
    }
  };
  server.setRequestHandler('tools/list', { params: z.unknown().optional() }, async (params) => {
    pageOne('tools/list', cursorOf(params));
    return { tools: deps.registry.list() } as never;
  });
  server.setRequestHandler('resources/list', { params: z.unknown().optional() }, async (params) => {
    pageOne('resources/list', cursorOf(params));
    return { resources: RESOURCES };
  });
  server.setRequestHandler('resources/templates/list', { params: z.unknown().optional() }, async (params) => {
    pageOne('resources/templates/list', cursorOf(params));
    return { resourceTemplates: RESOURCE_TEMPLATES };
  });
  // Params read by readResource, which refuses a missing uri in words (-32602); the SDK's own
  // check of them answered -32603 with zod's issue list. Its errors go out as thrown.
  server.setRequestHandler('resources/read', { params: z.unknown().optional() }, async (params) =>
    readResource(deps.registry, params),
  );
  server.setRequestHandler('tools/call', async (request, ctx: ServerContext) => {
    const payment = request.params._meta?.[MCP_PAYMENT_META];
    const caller = ctx.http?.authInfo?.extra?.caller as Caller | undefined;
    const origin = ctx.http?.authInfo?.extra?.origin as string | undefined;
    try {
      return (await callTool(deps, {
        name: request.params.name,
        args: request.params.arguments,
        ...(origin === undefined ? {} : { origin }),
        ...(payment === undefined ? {} : { payment }),
        ...(caller ? { caller } : {}),
      })) as never;
    } catch (err) {
      // -32003/-32004 stay JSON-RPC errors on this generation too, message as written.
      if (err instanceof ChannelError) throw new ProtocolError(err.code, err.message, err.data);
      throw err;
    }
  });
  return server;
}

export interface StatelessMcp {
  /** `caller`: who the route authenticated (an OAuth token on /mcp/signin); else identified from headers. */
  serve(request: FastifyRequest, reply: FastifyReply, caller?: Caller): Promise<FastifyReply>;
  close(): Promise<void>;
}

/**
 * A 2025-era request without a session, answered by the same 1.x server the sessions use over a
 * transport without session ids, as one JSON body (a one-shot client reads JSON, not a stream).
 */
async function serveLegacy(
  deps: ToolCallDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  caller: Caller | undefined,
): Promise<FastifyReply> {
  // A caller authenticated by the route came to /mcp/signin: its instructions name tokens, not keys.
  const server = createMcpServer(deps, caller ? SIGNIN_INSTRUCTIONS : SERVER_INSTRUCTIONS);
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  reply.raw.once('close', () => {
    void transport.close().catch(() => undefined);
    void server.close().catch(() => undefined);
  });
  return handOver(transport, request, reply, caller, 'stateless mcp request failed');
}

export function statelessMcp(deps: ToolCallDeps): StatelessMcp {
  let loaded: Promise<{ sdk: ModernSdk; handler: McpHttpHandler; signin: McpHttpHandler }> | null = null;
  const load = () => {
    loaded ??= import('@modelcontextprotocol/server').then((sdk) => {
      const handler = (instructions: string) =>
        sdk.createMcpHandler(() => createModernServer(sdk, deps, instructions), {
          // 2025-era requests never reach this handler (serveLegacy); 'auto' answers JSON since no
          // tool here emits notifications before its result.
          legacy: 'reject',
          onerror: (err) => deps.logger.debug({ err }, 'stateless mcp request refused'),
        });
      // One per path: /mcp/signin's instructions name its access token, /mcp's the keys.
      return { sdk, handler: handler(SERVER_INSTRUCTIONS), signin: handler(SIGNIN_INSTRUCTIONS) };
    });
    return loaded;
  };
  return {
    async serve(request, reply, caller) {
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers)) {
        if (value === undefined) continue;
        for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
      }
      const url = `${request.protocol}://${request.host}${request.url}`;
      const body = typeof request.body === 'string' ? request.body : JSON.stringify(request.body ?? null);
      const web = new Request(url, { method: request.method, headers, body });
      const loadedSdk = await load();
      const { sdk } = loadedSdk;
      if (await sdk.isLegacyRequest(web, request.body)) return serveLegacy(deps, request, reply, caller);
      const handler = caller ? loadedSdk.signin : loadedSdk.handler;
      const response = await handler.fetch(web, {
        parsedBody: request.body,
        authInfo: authInfo(request, caller),
      });
      reply.code(response.status);
      response.headers.forEach((value, name) => {
        reply.header(name, value);
      });
      const text = await response.text();
      return reply.send(text.length > 0 ? text : undefined);
    },
    close: async () => {
      if (loaded) {
        const { handler, signin } = await loaded;
        await Promise.all([handler.close(), signin.close()]);
      }
    },
  };
}
