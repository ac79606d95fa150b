import type { ServerResponse } from 'node:http';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Caller } from '../../metering/caller.ts';
import { JSON_UTF8 } from '../../shared/media-types.ts';
import { requestOrigin } from '../public-origin.ts';

/**
 * Hands the raw request to an SDK transport (a session's or a one-shot one): the headers Fastify
 * set so far (CORS) go along, and the caller rides as the transport's auth info. A throw before
 * the answer started is answered as JSON-RPC's internal error.
 */
export async function handOver(
  transport: StreamableHTTPServerTransport,
  request: FastifyRequest,
  reply: FastifyReply,
  caller: Caller | undefined,
  failure: string,
): Promise<FastifyReply> {
  reply.hijack();
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) reply.raw.setHeader(name, value as string | string[] | number);
  }
  const raw = request.raw as typeof request.raw & { auth?: AuthInfo };
  raw.auth = authInfo(request, caller);
  jsonWithCharset(reply.raw);
  if (Array.isArray(request.body)) answerAsArray(reply.raw, answeredAlso(request));
  try {
    await transport.handleRequest(raw, reply.raw, request.body);
  } catch (err) {
    request.log.error({ err }, failure);
    if (!reply.raw.headersSent) {
      reply.raw.writeHead(500, { 'content-type': JSON_UTF8 });
      reply.raw.end(
        JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id: null }),
      );
    }
  }
  return reply;
}

/**
 * The 1.x transport's `application/json` (its JSON answers and refusals) spelled as every other JSON
 * answer at /mcp is (JSON_UTF8: the route's refusals, tool answers, the 2.x SDK's handler), so a
 * client sees one spelling on every answer of a session.
 */
function jsonWithCharset(res: ServerResponse): void {
  const writeHead = res.writeHead;
  res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    const at = typeof args[1] === 'string' ? 2 : 1;
    const headers = args[at];
    if (headers !== null && typeof headers === 'object' && !Array.isArray(headers)) {
      for (const [name, value] of Object.entries(headers)) {
        if (value === 'application/json' && name.toLowerCase() === 'content-type') {
          args[at] = { ...headers, [name]: JSON_UTF8 };
          break;
        }
      }
    }
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as typeof writeHead;
}

/**
 * The caller as the SDK's auth info: its tool handlers read the client address, the origin the
 * request came to and the caller the caller hook resolved from it (a refused key never gets here:
 * the route answers it first).
 */
export function authInfo(request: FastifyRequest, caller: Caller | undefined): AuthInfo {
  const known = caller ?? request.caller ?? undefined;
  return {
    token: '',
    clientId: 'mcp',
    scopes: [],
    extra: {
      clientAddress: request.ip,
      origin: requestOrigin(request),
      ...(known ? { caller: known } : {}),
    },
  };
}

/** Answers of a batch's messages the route gave itself (the faults of checkEnvelope), sent with the transport's. */
const alsoAnswered = new WeakMap<FastifyRequest, readonly object[]>();

/** Sends `answers` in the batch's answer array beside those of the messages handed over. */
export function answerAlso(request: FastifyRequest, answers: readonly object[]): void {
  alsoAnswered.set(request, answers);
}

/** What answerAlso set for this request; none by default. */
export function answeredAlso(request: FastifyRequest): readonly object[] {
  return alsoAnswered.get(request) ?? [];
}

/**
 * A batch is answered with an array (JSON-RPC 2.0 §6), however many answers it has: the SDK
 * transport answers a batch holding one request (alone, or with notifications) with the bare
 * object. Its JSON answer is held until it ends, then sent as `[object]` when it is one 200 object,
 * its Content-Length set again; anything else (a refusal, an array) goes out as written. The
 * route's own answers to messages it took out (`also`: those at fault) join the array, and make a
 * 200 of the transport's 202 (a batch of notifications besides them). The transports here answer
 * JSON (enableJsonResponse), never a stream, to a POST.
 */
function answerAsArray(res: ServerResponse, also: readonly object[]): void {
  const { writeHead, write, end } = res;
  let head: Parameters<typeof writeHead> | null = null;
  const chunks: Buffer[] = [];
  const bytes = (chunk: unknown, encoding?: unknown): Buffer =>
    Buffer.isBuffer(chunk)
      ? chunk
      : typeof chunk === 'string'
        ? Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8')
        : Buffer.from(chunk as Uint8Array);
  res.writeHead = ((...args: Parameters<typeof writeHead>) => {
    head = args;
    return res;
  }) as typeof writeHead;
  res.write = ((chunk: unknown, encoding?: unknown, callback?: unknown) => {
    chunks.push(bytes(chunk, encoding));
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') queueMicrotask(() => (done as () => void)());
    return true;
  }) as typeof write;
  res.end = ((chunk?: unknown, encoding?: unknown, callback?: unknown) => {
    res.writeHead = writeHead;
    res.write = write;
    res.end = end;
    let done = callback;
    if (typeof chunk === 'function') done = chunk;
    else if (chunk !== undefined && chunk !== null) chunks.push(bytes(chunk, encoding));
    if (typeof encoding === 'function') done = encoding;
    let body = Buffer.concat(chunks);
    const status = head?.[0] ?? res.statusCode;
    if (status === 200 && body[0] === 0x7b /* { */) {
      body = Buffer.concat([Buffer.from('['), body, Buffer.from(']')]);
    }
    if (also.length > 0) {
      const theirs = JSON.stringify(also);
      const close = body.lastIndexOf(0x5d /* ] */);
      if (status === 200 && body[0] === 0x5b /* [ */ && close > 0) {
        body = Buffer.concat([body.subarray(0, close), Buffer.from(`,${theirs.slice(1)}`)]);
      } else if (status === 202) {
        body = Buffer.from(theirs);
        res.statusCode = 200;
        res.setHeader('content-type', JSON_UTF8);
        if (head !== null) head = [200] as unknown as typeof head;
      }
    }
    if (status === 200 || also.length > 0) {
      if (head !== null) head = withLength(head, body.length);
      if (res.hasHeader('content-length')) res.setHeader('content-length', body.length);
    }
    if (head !== null) writeHead.apply(res, head);
    const finish = end as (this: ServerResponse, body: Buffer, callback?: () => void) => ServerResponse;
    return finish.call(res, body, typeof done === 'function' ? (done as () => void) : undefined);
  }) as typeof end;
}

/** writeHead's arguments with the Content-Length among their headers (if any) set to `length`. */
function withLength<T extends unknown[]>(head: T, length: number): T {
  const args = [...head] as unknown[];
  const at = typeof args[1] === 'string' ? 2 : 1;
  const headers = args[at];
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) return head;
  const copy: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(headers)) {
    copy[name] = name.toLowerCase() === 'content-length' ? length : value;
  }
  args[at] = copy;
  return args as T;
}
