/**
 * Refusals of a JSON-RPC request's `params` that the SDKs answered badly: a session's transport
 * called `"params":"x"` a parse error (-32700) although the JSON is valid, the session-less path
 * an invalid request (-32600); `initialize` with params missing members answered -32603 with
 * zod's issue list as the message. Contract 7.3 gives a tool's -32602 one delivery, a tool result
 * with isError (HTTP 200); the handshake is not a tool and has no result to carry isError:
 * - `tools/call` (with an id) is not refused here: every params shape, an array or a string
 *   included, is the -32602 tool error callTool answers on the session, one-shot and 2026-07-28
 *   paths (session-call.ts);
 * - any other method with `params` present but not an object (a string, number, boolean, null or
 *   an array): -32600 Invalid Request, HTTP 400 (JSON-RPC 2.0 allows an array, but MCP names its
 *   params);
 * - `initialize` without a string protocolVersion, an object capabilities, or clientInfo with a
 *   string name and version: -32602 Invalid params (JSON-RPC 2.0 §5.1; MCP's lifecycle answers an
 *   initialize it cannot serve with -32602 too) as a JSON-RPC error, HTTP 400, naming the members;
 *   never a session opened on a guessed revision;
 * - any other method (a notification too) whose `params._meta` is not what MCP defines (an
 *   object; its progressToken a string or an integer; its related task an object with a string
 *   taskId): -32600 Invalid Request, HTTP 400, with the request's id. The SDK transports called
 *   it a parse error (-32700, id null) on a session. A tools/call's is its -32602 tool error.
 */

import { MCP_INVALID_PARAMS, MCP_INVALID_REQUEST } from './error-codes.ts';
import { isPlainObject, kindOf } from './json-shape.ts';

export interface ParamsRefusal {
  status: number;
  code: number;
  message: string;
  id: string | number | null;
}

/** The `_meta` key of a request's related task (MCP tasks). */
const RELATED_TASK_META = 'io.modelcontextprotocol/related-task';

/**
 * What is wrong with a request's or notification's `params._meta` as sent (undefined: none
 * sent), in words, with the member's path; null when MCP's schema takes it. The SDKs check these
 * members before any handler runs.
 */
export function metaIssue(meta: unknown): { path: string; message: string } | null {
  if (meta === undefined) return null;
  if (!isPlainObject(meta)) {
    return { path: '_meta', message: `params._meta must be an object (or left out), not ${kindOf(meta)}` };
  }
  const token = meta.progressToken;
  if (
    token !== undefined &&
    typeof token !== 'string' &&
    !(typeof token === 'number' && Number.isSafeInteger(token))
  ) {
    return {
      path: '_meta.progressToken',
      message: `params._meta.progressToken must be a string or an integer, not ${kindOf(token)}${typeof token === 'number' ? ` (${token})` : ''}`,
    };
  }
  const task = meta[RELATED_TASK_META];
  if (task !== undefined && !(isPlainObject(task) && typeof task.taskId === 'string')) {
    return {
      path: `_meta.${RELATED_TASK_META}`,
      message: `params._meta["${RELATED_TASK_META}"] must be an object with a string taskId, not ${kindOf(task)}`,
    };
  }
  return null;
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
  // A tools/call is answered by callTool whatever its params (the tool error of contract 7.3).
  if (body.method === 'tools/call' && id !== null) return null;
  const params = body.params;
  if (params !== undefined && !isPlainObject(params)) {
    return {
      status: 400,
      code: MCP_INVALID_REQUEST,
      message: `Invalid Request: params must be an object (or left out), not ${kindOf(params)}`,
      id,
    };
  }
  const meta = isPlainObject(params) ? metaIssue(params._meta) : null;
  if (meta !== null) {
    return { status: 400, code: MCP_INVALID_REQUEST, message: `Invalid Request: ${meta.message}`, id };
  }
  if (body.method === 'initialize' && id !== null) {
    const bad = badInitializeMembers(params ?? {});
    if (bad.length > 0) {
      return {
        status: 400,
        code: MCP_INVALID_PARAMS,
        message: `Invalid params: initialize needs params.${bad.join(', params.')}`,
        id,
      };
    }
  }
  return null;
}
