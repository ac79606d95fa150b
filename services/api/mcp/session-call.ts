import type { FastifyReply, FastifyRequest } from 'fastify';
import { JSON_UTF8 } from '../../shared/media-types.ts';
import { requestOrigin } from '../public-origin.ts';
import { escapeJson, joinBytes } from './answer-json.ts';
import { isPlainObject } from './json-shape.ts';
import { metaIssue } from './params-check.ts';
import { SERVER_INFO } from './server.ts';
import {
  ChannelError,
  callTool,
  MCP_PAYMENT_META,
  structuredJsonOf,
  type ToolCallDeps,
} from './tool-call.ts';
import { MODERN_REVISION, SESSION_VERSIONS } from './versions.ts';

/**
 * The one request every plan customer repeats, `tools/call` (on an open session, one-shot
 * without one, or on the 2026-07-28 revision), answered without the SDKs' transports. Without
 * this path a one-shot call built a server and a transport per request and cost four times the
 * session call; a 2026-07-28 call a web Request, a server and the 2.x SDK's envelope checks.
 * Profiled under load, the session transport cost more than the call itself: it rebuilds each Node request as a web Request (headers copied, a URL
 * parsed, an AbortSignal), zod-parses the JSON-RPC message and again the tool call and its
 * result, then serialises the answer into a web Response that an adapter streams back. Here the
 * body Fastify already parsed is checked by hand and the answer is serialised once.
 *
 * Only the plain shape is taken: one JSON-RPC request (no batch), `params` (or none) with at most
 * `name`, `arguments` and `_meta["x402/payment"]`, and headers the transport would accept. A
 * `name` that is not a string, `arguments` that are not an object, or `params` that are not an
 * object (a string, number, boolean, null or an array) are taken too: callTool refuses them in
 * words, the -32602 tool error of contract 7.3, where the SDKs answered zod's issue list or a
 * parse error.
 * Everything else (another method, progress tokens, tasks, a bad Accept or protocol version, a
 * 2026 envelope in another shape) goes to the SDKs, which answer it, errors included, as before.
 */

export interface PlainToolCall {
  id: string | number;
  /** As sent: callTool refuses anything but a string. */
  name: unknown;
  /** As sent: callTool refuses anything but an object or nothing. */
  args: unknown;
  /** `params` as sent when it is not an object (callTool refuses it); else undefined. */
  params: unknown;
  /** `params._meta` as sent: callTool refuses one MCP does not define. */
  meta: unknown;
  payment: unknown;
}

/** What a call without params is read as. */
const NO_PARAMS: Readonly<Record<string, unknown>> = Object.freeze({});

/**
 * The body's tools/call in the plain shape, its `_meta` keys all in `allowed`; else null. A call
 * whose name is not a string or whose arguments are not an object is taken whatever other params
 * and `_meta` keys it carries (`malformed`): the SDKs answered it with zod's issue list, callTool
 * refuses it in words; its headers are still checked.
 */
function plainBody(
  request: FastifyRequest,
  allowed: ReadonlySet<string>,
): {
  id: string | number;
  params: Record<string, unknown>;
  /** `params._meta` as sent (an object unless the call is malformed). */
  meta: unknown;
  malformed: boolean;
  /** `params` as sent when not an object (then `params` above is empty); else undefined. */
  notObject: unknown;
} | null {
  const body = request.body;
  if (!isPlainObject(body) || body.jsonrpc !== '2.0' || body.method !== 'tools/call') return null;
  const { id } = body;
  if (typeof id !== 'string' && typeof id !== 'number') return null;
  // No params at all is a call without a name, refused as such by callTool; params that are not
  // an object, a call naming no tool, refused in those words.
  const sent = body.params;
  const notObject = sent !== undefined && !isPlainObject(sent) ? sent : undefined;
  const params =
    sent === undefined || notObject !== undefined ? NO_PARAMS : (sent as Record<string, unknown>);
  const args = params.arguments;
  const meta = params._meta;
  // A `_meta` MCP does not define (not an object, a progress token neither a string nor an
  // integer) is malformed too: the SDK transports called it a parse error.
  const malformed =
    notObject !== undefined ||
    typeof params.name !== 'string' ||
    (args !== undefined && !isPlainObject(args)) ||
    metaIssue(meta) !== null;
  // for-in over the parsed body's own keys (JSON.parse makes no inherited enumerable ones), not
  // an array of them made per call.
  if (!malformed) {
    for (const key in params) {
      if (key !== 'name' && key !== 'arguments' && key !== '_meta') return null;
    }
  }
  if (meta !== undefined && !malformed) {
    if (!isPlainObject(meta)) return null;
    for (const key in meta) if (!allowed.has(key)) return null;
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
    // The plain media type as most clients send it, compared before it is taken apart.
    (contentType !== 'application/json' &&
      contentType.split(';', 1)[0]!.trim().toLowerCase() !== 'application/json')
  )
    return null;
  return { id, params, meta, malformed, notObject };
}

const LEGACY_META = new Set([MCP_PAYMENT_META]);

/**
 * The call when the request is one this path answers the same way as the 2025-era transport (a
 * session's, or the session-less one-shot's); else null.
 */
export function plainToolCall(request: FastifyRequest): PlainToolCall | null {
  const plain = plainBody(request, LEGACY_META);
  if (plain === null) return null;
  const headers = request.headers;
  const version = headers['mcp-protocol-version'];
  if (version !== undefined && (typeof version !== 'string' || !SESSION_VERSIONS.includes(version)))
    return null;
  // Headers of the 2026-07-28 revision: the maintained SDK would not classify it as 2025-era.
  if (headers['mcp-method'] !== undefined || headers['mcp-name'] !== undefined) return null;
  const { id, params, meta, notObject } = plain;
  return {
    id,
    name: params.name,
    args: params.arguments,
    params: notObject,
    meta,
    payment: isPlainObject(meta) ? meta[MCP_PAYMENT_META] : undefined,
  };
}

const PROTOCOL_VERSION_META = 'io.modelcontextprotocol/protocolVersion';
const CLIENT_INFO_META = 'io.modelcontextprotocol/clientInfo';
const CLIENT_CAPABILITIES_META = 'io.modelcontextprotocol/clientCapabilities';
const MODERN_META = new Set([
  PROTOCOL_VERSION_META,
  CLIENT_INFO_META,
  CLIENT_CAPABILITIES_META,
  MCP_PAYMENT_META,
]);

/**
 * A 2026-07-28 `tools/call` in the one shape this path answers as the 2.x SDK's handler does:
 * the envelope exactly as the SDK's own client sends it (the revision, `clientInfo` with a name
 * and a version, no client capabilities), and `Mcp-Method`/`Mcp-Name` headers that agree with
 * the body. Any other envelope (capabilities to check, other keys), or any disagreement, goes to
 * the SDK, which validates and answers it, refusals included.
 */
export function modernToolCall(request: FastifyRequest): PlainToolCall | null {
  const headers = request.headers;
  if (headers['mcp-protocol-version'] !== MODERN_REVISION || headers['mcp-method'] !== 'tools/call') {
    return null;
  }
  const plain = plainBody(request, MODERN_META);
  if (plain === null) return null;
  // params that are not an object cannot carry the envelope: the headers name the revision and
  // the method, and no Mcp-Name may be sent for a call that names no tool.
  if (plain.notObject !== undefined) {
    if (headers['mcp-name'] !== undefined) return null;
    return {
      id: plain.id,
      name: undefined,
      args: undefined,
      params: plain.notObject,
      meta: undefined,
      payment: undefined,
    };
  }
  const { id, params, meta } = plain;
  // The envelope rides in `_meta`: without one (or with one that is not an object) the SDK answers.
  if (!isPlainObject(meta)) return null;
  // Mcp-Name must agree with a string name; with no name (or not a string one) there must be none.
  const name = params.name;
  if (headers['mcp-name'] !== (typeof name === 'string' ? name : undefined)) return null;
  if (meta[PROTOCOL_VERSION_META] !== MODERN_REVISION) return null;
  const capabilities = meta[CLIENT_CAPABILITIES_META];
  if (!isPlainObject(capabilities)) return null;
  const info = meta[CLIENT_INFO_META];
  if (!isPlainObject(info) || typeof info.name !== 'string' || typeof info.version !== 'string') return null;
  // A malformed call is refused here with any envelope of the right shape (the SDK answered it
  // with zod's issue list); a well-formed one only with the envelope its own client sends.
  if (!plain.malformed) {
    if (Object.keys(capabilities).length > 0) return null;
    for (const key of Object.keys(info)) if (key !== 'name' && key !== 'version') return null;
  }
  return {
    id,
    name,
    args: params.arguments,
    params: undefined,
    meta,
    payment: meta[MCP_PAYMENT_META],
  };
}

/**
 * How the answer goes out: on a 2025-era session (its id in the header), one-shot without one,
 * or on the 2026-07-28 revision (the result stamped as the 2.x SDK stamps it, no session).
 */
export type CallChannel =
  /** `cancelled`: whether the client cancelled the call (notifications/cancelled on the session). */
  | { kind: 'session'; sessionId: string; cancelled?: () => boolean }
  | { kind: 'one-shot' }
  | { kind: 'modern' };

/**
 * Answers the call as the SDK server would: `{result, jsonrpc, id}`, or `{jsonrpc, id, error}`
 * for a thrown error (its code when it has one, else -32603), HTTP 200, JSON, the session id
 * when there is one.
 */
export async function answerToolCall(
  deps: ToolCallDeps,
  call: PlainToolCall,
  request: FastifyRequest,
  reply: FastifyReply,
  channel: CallChannel,
): Promise<void> {
  let body: Buffer;
  // Identified by the caller hook in front of the route: not resolved a second time.
  const caller = request.caller ?? undefined;
  try {
    // One shape for every call (undefined where absent, as callTool reads it), not spread per call;
    // the request's id (a UUID made per request) rather than a second one made for the call.
    const result = await callTool(deps, {
      name: call.name,
      args: call.args,
      params: call.params,
      meta: call.meta,
      payment: call.payment,
      caller,
      requestId: request.id,
      origin: requestOrigin(request),
      cancelled: channel.kind === 'session' ? channel.cancelled : undefined,
    });
    body = answerBytes(result, call.id, channel.kind === 'modern');
  } catch (err) {
    const e = err as { code?: unknown; message?: string; data?: unknown };
    const code = Number.isSafeInteger(e.code) ? (e.code as number) : -32603;
    if (!(err instanceof ChannelError)) request.log.error({ err }, 'mcp tool call failed');
    body = Buffer.from(
      JSON.stringify({
        jsonrpc: '2.0',
        id: call.id,
        error: {
          code,
          message: e.message ?? 'Internal error',
          ...(e.data !== undefined ? { data: e.data } : {}),
        },
      }),
    );
  }
  reply.code(200);
  // Sent as bytes, with the one media type of every JSON answer at /mcp (Fastify adds a charset
  // only to a string body). Resolves to nothing, not the reply: see answeredBy.
  reply.header('content-type', JSON_UTF8);
  if (channel.kind === 'session') reply.header('mcp-session-id', channel.sessionId);
  reply.send(body);
}
const SERVER_INFO_META = 'io.modelcontextprotocol/serverInfo';
const SERVER_INFO_JSON = JSON.stringify(SERVER_INFO);
/** What the 2026-07-28 revision adds to a result, after the result's own fields. */
const MODERN_RESULT_END = `,"resultType":"complete","_meta":{"${SERVER_INFO_META}":${SERVER_INFO_JSON}}}`;
const RESULT_START = Buffer.from('{"result":{"content":[{"type":"text","text":"');
const RESULT_MIDDLE = '"}],"structuredContent":';

/**
 * `{"result":…,"jsonrpc":"2.0","id":…}` as UTF-8. A result exactly as toolResult made it (its text
 * content the JSON of its structuredContent, made once) is spliced together from that JSON and its
 * escape, the start of both already UTF-8 when the revision has it (answer-json.ts); any other is
 * serialised as usual.
 */
function answerBytes(
  result: Awaited<ReturnType<typeof callTool>>,
  id: string | number,
  modern: boolean,
): Buffer {
  const end = `,"jsonrpc":"2.0","id":${JSON.stringify(id)}}`;
  const made = structuredJsonOf(result);
  if (made === undefined || !onlyContentFields(result)) {
    const json = modern ? modernResultJson(result) : JSON.stringify(result);
    return Buffer.from(`{"result":${json}${end}`);
  }
  const close = modern ? MODERN_RESULT_END : '}';
  const split = made.split;
  if (split === undefined) {
    const escaped = made.escaped ?? escapeJson(made.json);
    return Buffer.from(
      `{"result":{"content":[{"type":"text","text":"${escaped}${RESULT_MIDDLE}${made.json}${close}${end}`,
    );
  }
  return joinBytes([
    RESULT_START,
    split.escapedHead,
    `${split.escapedTail}${RESULT_MIDDLE}`,
    split.head,
    `${split.tail}${close}${end}`,
  ]);
}

/** Whether `result`'s own fields are content and structuredContent alone (counted without an array of its keys). */
function onlyContentFields(result: object): boolean {
  let fields = 0;
  for (const key in result) {
    if (key !== 'content' && key !== 'structuredContent') return false;
    fields++;
  }
  return fields === 2;
}

/**
 * A tool result that is not as toolResult made it, as the 2.x SDK encodes it on the 2026-07-28
 * revision: the result's fields in its schema's order (content, structuredContent, isError, then
 * any other), `resultType` and `_meta` carrying the server's identity after the result's own
 * `_meta` keys.
 */
function modernResultJson(result: Awaited<ReturnType<typeof callTool>>): string {
  const { content, structuredContent, isError, _meta, ...rest } = result;
  return JSON.stringify({
    content,
    ...(structuredContent === undefined ? {} : { structuredContent }),
    ...(isError === undefined ? {} : { isError }),
    ...rest,
    resultType: 'complete',
    _meta: { ...(_meta ?? {}), [SERVER_INFO_META]: SERVER_INFO },
  });
}
