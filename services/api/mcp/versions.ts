import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';

/**
 * The MCP revisions this server speaks, from one place: the discovery card
 * (`/.well-known/mcp.json`), the route's check of `MCP-Protocol-Version` and its refusal's list
 * all read this. A session's initialize settles on one of `SESSION_VERSIONS` (the 1.x SDK
 * server's own list, which it negotiates from: the revision asked for, else its latest); the
 * 2026-07-28 revision is served without a session (stateless.ts).
 */
export const MODERN_REVISION = '2026-07-28';
export const SESSION_VERSIONS: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS;
/** Newest first. */
export const PROTOCOL_VERSIONS: readonly string[] = [MODERN_REVISION, ...SESSION_VERSIONS];
