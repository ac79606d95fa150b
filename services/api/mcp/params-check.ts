/**
 * Refusals of a JSON-RPC request's `params` that the SDKs answered badly: a session's transport
 * called `"params":"x"` a parse error (-32700) although the JSON is valid, the session-less path
 * an invalid request (-32600); `initialize` with params missing members answered -32603 with
 * zod's issue list as the message. Here, the same words on every path:
 * - `params` present but not structured (a string, number, boolean or null): -32600 Invalid
 *   Request (JSON-RPC 2.0: params, when present, MUST be an object or an array);
 * - `params` an array: -32602 Invalid params (structured, but MCP names its params);
 * - `initialize` without a string protocolVersion, an object capabilities, or clientInfo with a
 *   string name and version: -32602, naming the members.
 */

import { MCP_INVALID_PARAMS, MCP_INVALID_REQUEST } from './error-codes.ts';
import { isPlainObject, kindOf } from './json-shape.ts';

export interface ParamsRefusal {
  status: number;
  code: number;
  message: string;
  id: string | number | null;
}

/** The members of initialize's params that are missing or of the wrong type. */
function badInitializeMembers(params: Record<string, unknown>): string[] {
  const bad: string[] = [];
  if (typeof params.protocolVersion !== 'string') bad.push('protocolVersion (a string)');
  if (!isPlainObject(params.capabilities)) bad.push('capabilities (an object)');
  const info = params.clientInfo;
  if (!isPlainObject(info)) bad.push('clientInfo (an object with name and version)');
  else {
    if (typeof info.name !== 'string') bad.push('clientInfo.name (a string)');
    if (typeof info.version !== 'string') bad.push('clientInfo.version (a string)');
  }
  return bad;
}

/**
 * The refusal of a single JSON-RPC request (not a batch, not a response) whose params are not
 * acceptable as above; null for anything else, which goes on to the transports as before.
 */
export function paramsRefusal(body: unknown): ParamsRefusal | null {
  if (!isPlainObject(body) || body.jsonrpc !== '2.0' || typeof body.method !== 'string') return null;
  const rawId = body.id;
  const id = typeof rawId === 'string' || typeof rawId === 'number' ? rawId : null;
  const params = body.params;
  if (params !== undefined && !isPlainObject(params)) {
    if (Array.isArray(params)) {
      return {
        status: 400,
        code: MCP_INVALID_PARAMS,
        message: `Invalid params: ${body.method} takes params by name, an object, not an array`,
        id,
      };
    }
    return {
      status: 400,
      code: MCP_INVALID_REQUEST,
      message: `Invalid Request: params must be an object (or left out), not ${kindOf(params)}`,
      id,
    };
  }
  if (body.method === 'initialize' && id !== null) {
    const bad = badInitializeMembers(params ?? {});
    if (bad.length > 0) {
      return {
        status: 200,
        code: MCP_INVALID_PARAMS,
        message: `Invalid params: initialize needs params.${bad.join(', params.')}`,
        id,
      };
    }
  }
  return null;
}
