import type { Dispatcher } from 'undici';
import { EVENT_VERSION_HEADER, SEQUENCE_HEADER, signedHeaders } from '../../contracts/webhook-verify.ts';
import { parseRetryAfter } from './retry-policy.ts';

/** Response bodies kept in the delivery log, at most. */
export const RESPONSE_LIMIT = 1024;

export interface SendInput {
  url: string;
  secret: string;
  /** The secret before a rotation, during its overlap: it signs too. */
  previousSecret?: string | null;
  event: string;
  deliveryId: string;
  /** Sent as X-Service-Sequence when known. */
  seq?: number | null;
  /** The subscription's pinned payload version, sent as X-Service-Event-Version. */
  eventVersion?: number;
  body: string;
  timeoutMs: number;
}

export interface SendResult {
  ok: boolean;
  status: number | null;
  latencyMs: number;
  error: string | null;
  response: string | null;
  retryAfterMs: number | null;
}

/** undici's own timeouts (coarse timers, a backstop to the request's own). */
const TIMEOUT_CODES: ReadonlySet<string> = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: string }).code;
  if (err.name === 'TimeoutError' || err.name === 'AbortError' || (code && TIMEOUT_CODES.has(code)))
    return 'timeout: no complete response in time';
  return code ? `${code}: ${err.message}` : err.message;
}

/** Where each subscription URL points, parsed once: the same few URLs are posted to over and over. */
const targets = new Map<string, { origin: string; path: string }>();

function targetOf(url: string): { origin: string; path: string } {
  let target = targets.get(url);
  if (target === undefined) {
    const parsed = new URL(url);
    target = { origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
    if (targets.size >= 10_000) targets.clear();
    targets.set(url, target);
  }
  return target;
}

const timeoutError = () => new DOMException('no complete response in time', 'TimeoutError');

/**
 * One request through undici's dispatcher interface: the response is taken as it arrives (status,
 * Retry-After, the first RESPONSE_LIMIT bytes) with no response stream, promise wrapper or async
 * resource per request, which `request()` builds and this path paid for once per delivery. The
 * request's own timer aborts it after `timeoutMs`; undici's header and body timeouts back it up.
 */
function post(
  agent: Dispatcher,
  url: string,
  headers: Record<string, string>,
  body: Buffer,
  timeoutMs: number,
): Promise<{ status: number; retryAfter: string | undefined; text: string }> {
  const { origin, path } = targetOf(url);
  return new Promise((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null;
    let status = 0;
    let retryAfter: string | undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const text = () => Buffer.concat(chunks, size).toString('utf8').slice(0, RESPONSE_LIMIT);
    const finish = (outcome: { error: Error } | { text: string }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if ('error' in outcome) reject(outcome.error);
      else resolve({ status, retryAfter, text: outcome.text });
    };
    const timer = setTimeout(() => {
      // With headers in, the answer stands and only its body was cut short, as a stalled body is.
      finish(status >= 200 ? { text: '' } : { error: timeoutError() });
      controller?.abort(timeoutError());
    }, timeoutMs);
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c;
        if (settled) c.abort(timeoutError());
      },
      onResponseStart(_c, statusCode, responseHeaders) {
        // 1xx informational answers come before the real one.
        if (statusCode < 200) return;
        status = statusCode;
        const value = responseHeaders['retry-after'];
        retryAfter = Array.isArray(value) ? value[0] : value;
      },
      onResponseData(c, chunk) {
        if (settled) return;
        chunks.push(chunk);
        size += chunk.length;
        // Enough for the log; the rest is not worth receiving.
        if (size >= RESPONSE_LIMIT) {
          finish({ text: text() });
          c.abort(new Error('response body past the logged limit'));
        }
      },
      onResponseEnd() {
        finish({ text: text() });
      },
      onResponseError(_c, error) {
        // An answer cut off mid-body is logged without its body, as a failed read always was.
        finish(status >= 200 ? { text: '' } : { error });
      },
    };
    try {
      agent.dispatch(
        { origin, path, method: 'POST', headers, body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs },
        handler,
      );
    } catch (error) {
      finish({ error: error as Error });
    }
  });
}

/**
 * One signed POST. Only 2xx counts as success; 3xx is a failure (redirects are not followed),
 * like every 4xx/5xx, timeout and connection error. Never throws.
 */
export async function sendSigned(agent: Dispatcher, input: SendInput): Promise<SendResult> {
  const started = performance.now();
  const timestamp = Math.floor(Date.now() / 1000);
  // Encoded once for both signatures and the request, instead of once each.
  const raw = Buffer.from(input.body, 'utf8');
  const headers = signedHeaders({
    secret: input.secret,
    previousSecret: input.previousSecret ?? null,
    event: input.event,
    deliveryId: input.deliveryId,
    timestamp,
    rawBody: raw,
  });
  headers['content-type'] = 'application/json';
  headers['user-agent'] = 'signal-service-webhooks/1';
  if (input.seq) headers[SEQUENCE_HEADER] = String(input.seq);
  headers[EVENT_VERSION_HEADER] = String(input.eventVersion ?? 1);
  try {
    const { status, retryAfter, text } = await post(agent, input.url, headers, raw, input.timeoutMs);
    const ok = status >= 200 && status < 300;
    return {
      ok,
      status,
      latencyMs: performance.now() - started,
      error: ok
        ? null
        : status >= 300 && status < 400
          ? `redirect (${status}) not followed`
          : `HTTP ${status}`,
      response: text,
      retryAfterMs: parseRetryAfter(retryAfter, Date.now()),
    };
  } catch (err) {
    return {
      ok: false,
      status: null,
      latencyMs: performance.now() - started,
      error: describeError(err).slice(0, 500),
      response: null,
      retryAfterMs: null,
    };
  }
}
