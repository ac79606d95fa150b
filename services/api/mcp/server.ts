import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { SERVICE_VERSION } from '../../../contracts/service-version.ts';
import type { Caller } from '../../metering/caller.ts';
import { MCP_INVALID_PARAMS } from './error-codes.ts';
import { isPlainObject, kindOf } from './json-shape.ts';
import { RESOURCE_TEMPLATES, RESOURCES, readResource } from './resources.ts';
import { ChannelError, callTool, MCP_PAYMENT_META, type ToolCallDeps } from './tool-call.ts';

/**
 * resources/read with whatever params came, none included: readResource judges them (-32602 in
 * words). Optional: under zod 4 a bare z.unknown() member is required, and the SDK's own parse
 * would refuse a request without params with -32603 and zod's issue list.
 */
const ReadResourceRequest = ReadResourceRequestSchema.extend({ params: z.unknown().optional() });
/** The lists' params, whatever came: refuseCursor judges a cursor of the wrong type in one line. */
const ListToolsRequest = ListToolsRequestSchema.extend({ params: z.unknown().optional() });
const ListResourcesRequest = ListResourcesRequestSchema.extend({ params: z.unknown().optional() });
const ListResourceTemplatesRequest = ListResourceTemplatesRequestSchema.extend({
  params: z.unknown().optional(),
});

/** What initialize names: the package's version (service-version.ts), as every other document does. */
export const SERVER_INFO = { name: 'signal-service', version: SERVICE_VERSION };

/** What every generation of the server offers: the sold and free tools, and the track record as resources. */
export const SERVER_CAPABILITIES = { tools: { listChanged: false }, resources: { listChanged: false } };

const QUOTA_INSTRUCTIONS =
  'Every result carries _service.auth and _service.quota with the live remaining calls. When the ' +
  'quota is used up, the tool error says when it resets and how to go on; where the service sells ' +
  'calls it carries x402 payment requirements: retry the call with the payment in ' +
  '_meta["x402/payment"] to pay for that call alone.';

/** What /mcp tells a host at initialize: keys and anonymous calls. */
export const SERVER_INSTRUCTIONS =
  'Crypto trade verdicts, market regimes and funding-arbitrage scans. Send an API key as ' +
  '"Authorization: Bearer sk_live_..." (anonymous callers get the free limits; a host that signs ' +
  `in with OAuth uses /mcp/signin). ${QUOTA_INSTRUCTIONS}`;

/** What /mcp/signin tells a host at initialize: there only an OAuth access token is accepted, never a key. */
export const SIGNIN_INSTRUCTIONS =
  'Crypto trade verdicts, market regimes and funding-arbitrage scans. This endpoint acts as the ' +
  'API key chosen at OAuth sign-in: send the access token as "Authorization: Bearer <token>" ' +
  '(an API key is refused here; keys go to /mcp). ' +
  QUOTA_INSTRUCTIONS;

/**
 * A list request's cursor, refused: every list here is answered whole, with no nextCursor, so a
 * cursor is never one this server gave out (MCP: an invalid cursor is -32602 Invalid params).
 * Thrown as ChannelError: code and message go out as written, with no data (the message names
 * the field and why), as resources/read's -32602 does.
 */
export function refuseCursor(method: string, cursor: unknown): void {
  if (cursor === undefined) return;
  if (typeof cursor !== 'string') {
    // The SDKs' own check of it answered -32603 with zod's issue list over several lines.
    throw new ChannelError(
      MCP_INVALID_PARAMS,
      `Invalid params: ${method}'s params.cursor must be a string (or left out), not ${kindOf(cursor)}`,
    );
  }
  throw new ChannelError(
    MCP_INVALID_PARAMS,
    `Invalid params: ${method} answers every item in one page (no nextCursor); the cursor ${JSON.stringify(cursor)} was not given by this server`,
  );
}

/** A list request's params.cursor as sent (params that are not an object are refused before the handlers). */
export const cursorOf = (params: unknown): unknown => (isPlainObject(params) ? params.cursor : undefined);

/**
 * One MCP server per session. The low-level Server, not McpServer: McpServer turns every thrown
 * error into `result.isError`, while -32003 and -32004 must leave as JSON-RPC `error` objects.
 */
export function createMcpServer(deps: ToolCallDeps, instructions = SERVER_INSTRUCTIONS): Server {
  const server = new Server(SERVER_INFO, { capabilities: SERVER_CAPABILITIES, instructions });
  // Every list is one page (no nextCursor): any cursor is one this server never gave (-32602).
  server.setRequestHandler(ListToolsRequest, async (request) => {
    refuseCursor('tools/list', cursorOf(request.params));
    return { tools: deps.registry.list() };
  });
  server.setRequestHandler(ListResourcesRequest, async (request) => {
    refuseCursor('resources/list', cursorOf(request.params));
    return { resources: RESOURCES };
  });
  server.setRequestHandler(ListResourceTemplatesRequest, async (request) => {
    refuseCursor('resources/templates/list', cursorOf(request.params));
    return { resourceTemplates: RESOURCE_TEMPLATES };
  });
  // Params read by readResource, which refuses a missing uri in words (-32602); the SDK's own
  // check of them would answer -32603 with zod's issue list.
  server.setRequestHandler(ReadResourceRequest, async (request) =>
    readResource(deps.registry, request.params),
  );
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const payment = request.params._meta?.[MCP_PAYMENT_META];
    // A caller authenticated by the route (an OAuth token on /mcp/signin) is not identified again from headers.
    const caller = extra.authInfo?.extra?.caller as Caller | undefined;
    const origin = extra.authInfo?.extra?.origin as string | undefined;
    return callTool(deps, {
      name: request.params.name,
      args: request.params.arguments,
      ...(origin === undefined ? {} : { origin }),
      ...(payment === undefined ? {} : { payment }),
      ...(caller ? { caller } : {}),
    });
  });
  return server;
}
