/**
 * JSON-RPC codes sent where no catalog entry is thrown (initialize's params, a request that is no
 * JSON-RPC request); a refusal's number (-32003, -32004) is its catalog entry's `rpc`.
 */
export const MCP_INVALID_PARAMS = -32602;
/** A request that is not a valid JSON-RPC request, such as params that are not an object. */
export const MCP_INVALID_REQUEST = -32600;
