/** JSON-RPC codes of the tool channel (contract §7.3); -32602 also refuses initialize's params. */
export const MCP_INVALID_PARAMS = -32602;
/** A well-formed key that was never issued or was revoked; retrying will not help. */
export const MCP_UNKNOWN_KEY = -32003;
/** The key (or the quota behind it) could not be checked right now; retry shortly. */
export const MCP_UNVERIFIABLE = -32004;
/** A request that is not a valid JSON-RPC request, such as params that are not an object. */
export const MCP_INVALID_REQUEST = -32600;
