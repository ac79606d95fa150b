import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Caller, CallerRejectedError } from '../../metering/caller.ts';
import { RESOURCE_TEMPLATES, RESOURCES, readResource } from './resources.ts';
import { callTool, MCP_PAYMENT_META, type ToolCallDeps } from './tool-call.ts';

/** resources/read with whatever params came: readResource judges them. */
const ReadResourceRequest = ReadResourceRequestSchema.extend({ params: z.unknown() });

export const SERVER_INFO = { name: 'signal-service', version: '1.0.0' };

/** What every generation of the server offers: the sold and free tools, and the track record as resources. */
export const SERVER_CAPABILITIES = { tools: { listChanged: false }, resources: { listChanged: false } };

export const SERVER_INSTRUCTIONS =
  'Crypto trade verdicts, market regimes and funding-arbitrage scans. Send an API key as ' +
  '"Authorization: Bearer sk_live_..." (anonymous callers get the free limits). Every result ' +
  'carries _service.auth and _service.quota with the live remaining calls. When the quota is ' +
  'used up, the tool error carries x402 payment requirements: retry the call with the payment ' +
  'in _meta["x402/payment"] to pay for that call alone.';

/**
 * One MCP server per session. The low-level Server, not McpServer: McpServer turns every thrown
 * error into `result.isError`, while -32003 and -32004 must leave as JSON-RPC `error` objects.
 */
export function createMcpServer(deps: ToolCallDeps): Server {
  const server = new Server(SERVER_INFO, {
    capabilities: SERVER_CAPABILITIES,
    instructions: SERVER_INSTRUCTIONS,
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: deps.registry.list() }));
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: RESOURCE_TEMPLATES,
  }));
  // Params read by readResource, which refuses a missing uri in words (-32602); the SDK's own
  // check of them answered -32603 with zod's issue list.
  server.setRequestHandler(ReadResourceRequest, async (request) =>
    readResource(deps.registry, request.params),
  );
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const payment = request.params._meta?.[MCP_PAYMENT_META];
    // A caller authenticated by the route (an OAuth token on /mcp/signin) is not identified again from headers.
    const caller = extra.authInfo?.extra?.caller as Caller | undefined;
    const refused = extra.authInfo?.extra?.refused as CallerRejectedError | undefined;
    return callTool(deps, {
      name: request.params.name,
      args: request.params.arguments,
      ...(payment === undefined ? {} : { payment }),
      ...(caller ? { caller } : {}),
      ...(refused ? { refused } : {}),
    });
  });
  return server;
}
