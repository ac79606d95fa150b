/**
 * The raw MCP wire, for the tests and benches that post JSON-RPC themselves where the official
 * client would hide what they check (status codes, headers, the session id, the limits).
 */

/** What a streamable-HTTP client accepts: a JSON answer or an SSE stream. */
export const MCP_ACCEPT = 'application/json, text/event-stream';

/** The protocol revision the raw requests speak. */
export const MCP_PROTOCOL_VERSION = '2025-06-18';

/** A raw client's headers for a JSON-RPC POST to /mcp. */
export const MCP_HEADERS = { 'content-type': 'application/json', accept: MCP_ACCEPT } as const;

/** A raw client's headers for a request on an open session. */
export function mcpSessionHeaders(session: string) {
  return { ...MCP_HEADERS, 'mcp-session-id': session, 'mcp-protocol-version': MCP_PROTOCOL_VERSION };
}

/** The `initialize` request that opens a session, as a client named `client` sends it. */
export function mcpInitialize(client = 'raw', id = 1) {
  return {
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: {
      protocolVersion: MCP_PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: client, version: '0' },
    },
  } as const;
}
