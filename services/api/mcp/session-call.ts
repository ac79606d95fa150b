import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { limitedCaller } from '../rate-limit.ts';
import { escapeJson } from './answer-json.ts';
import {
  ChannelError,
  callTool,
  MCP_PAYMENT_META,
  structuredJsonOf,
  type ToolCallDeps,
} from './tool-call.ts';

/**
 * The one request every plan customer repeats, `tools/call` on an open session, answered
 * without the SDK's Streamable HTTP transport. Profiled under load, that transport cost more
 * than the call itself: it rebuilds each Node request as a web Request (headers copied, a URL
 * parsed, an AbortSignal), zod-parses the JSON-RPC message and again the tool call and its
 * result, then serialises the answer into a web Response that an adapter streams back. Here the
 * body Fastify already parsed is checked by hand and the answer is serialised once.
 *
 * Only the plain shape is taken: one JSON-RPC request (no batch), `params` with a string `name`,
 * object `arguments` and at most `_meta["x402/payment"]`, and headers the transport would accept.
 * Everything else (another method, progress tokens, tasks, a bad Accept or protocol version)
 * goes to the SDK transport, which answers it, errors included, exactly as before.
 */

export interface PlainToolCall {
  id: string | number;
  name: string;
  args: Record<string, unknown> | undefined;
  payment: unknown;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** The call when the request is one this path answers the same way as the transport; else null. */
export function plainToolCall(request: FastifyRequest): PlainToolCall | null {
  const body = request.body;
  if (!isPlainObject(body) || body.jsonrpc !== '2.0' || body.method !== 'tools/call') return null;
  const { id, params } = body;
  if ((typeof id !== 'string' && typeof id !== 'number') || !isPlainObject(params)) return null;
  if (typeof params.name !== 'string') return null;
  for (const key of Object.keys(params)) {
    if (key !== 'name' && key !== 'arguments' && key !== '_meta') return null;
  }
  const args = params.arguments;
  if (args !== undefined && !isPlainObject(args)) return null;
  const meta = params._meta;
  if (meta !== undefined) {
    if (!isPlainObject(meta)) return null;
    for (const key of Object.keys(meta)) if (key !== MCP_PAYMENT_META) return null;
  }
  const headers = request.headers;
  const accept = headers.accept;
  if (
    typeof accept !== 'string' ||
    !accept.includes('application/json') ||
    !accept.includes('text/event-stream')
  )
    return null;
  const contentType = headers['content-type'];
  if (
    typeof contentType !== 'string' ||
    contentType.split(';', 1)[0]!.trim().toLowerCase() !== 'application/json'
  )
    return null;
  const version = headers['mcp-protocol-version'];
  if (
    version !== undefined &&
    (typeof version !== 'string' || !SUPPORTED_PROTOCOL_VERSIONS.includes(version))
  )
    return null;
  return { id, name: params.name, args, payment: meta?.[MCP_PAYMENT_META] };
}

/**
 * Answers the call as the SDK server would: `{result, jsonrpc, id}`, or `{jsonrpc, id, error}`
 * for a thrown error (its code when it has one, else -32603), HTTP 200, JSON, the session id.
 */
export async function answerToolCall(
  deps: ToolCallDeps,
  call: PlainToolCall,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string,
): Promise<FastifyReply> {
  let text: string;
  // Identified by the rate limit in front of the route: not resolved a second time.
  const caller = limitedCaller(request);
  try {
    const result = await callTool(deps, {
      name: call.name,
      args: call.args,
      headers: request.headers,
      clientAddress: request.ip,
      ...(call.payment === undefined ? {} : { payment: call.payment }),
      ...(caller === undefined ? {} : { caller }),
    });
    text = `{"result":${resultJson(result)},"jsonrpc":"2.0","id":${JSON.stringify(call.id)}}`;
  } catch (err) {
    const e = err as { code?: unknown; message?: string; data?: unknown };
    const code = Number.isSafeInteger(e.code) ? (e.code as number) : -32603;
    if (!(err instanceof ChannelError)) request.log.error({ err }, 'mcp tool call failed');
    text = JSON.stringify({
      jsonrpc: '2.0',
      id: call.id,
      error: {
        code,
        message: e.message ?? 'Internal error',
        ...(e.data !== undefined ? { data: e.data } : {}),
      },
    });
  }
  return reply
    .code(200)
    .header('content-type', 'application/json')
    .header('mcp-session-id', sessionId)
    .send(text);
}

/**
 * A tool result as JSON. Its text content is the JSON of its structuredContent (toolResult in
 * tool-call.ts), already made once with its escape: both are spliced in rather than the object
 * serialised again.
 */
function resultJson(result: Awaited<ReturnType<typeof callTool>>): string {
  const made = structuredJsonOf(result);
  // Anything added to the result after it was made (a `_meta`, isError) is serialised as usual.
  if (made === undefined || Object.keys(result).length !== 2) return JSON.stringify(result);
  const escaped = made.escaped ?? escapeJson(made.json);
  return `{"content":[{"type":"text","text":"${escaped}"}],"structuredContent":${made.json}}`;
}
