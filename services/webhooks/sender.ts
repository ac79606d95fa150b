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

function isTimeoutError(err: Error): boolean {
  const code = (err as { code?: string }).code;
  return (
    err.name === 'TimeoutError' ||
    err.name === 'AbortError' ||
    (code !== undefined && TIMEOUT_CODES.has(code))
  );
}

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: string }).code;
  if (err.name === 'TimeoutError' && err.message.startsWith('no complete response'))
    return `timeout: ${err.message}`;
  if (isTimeoutError(err)) return 'timeout: no complete response in time';
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

const timeoutError = (message = 'no complete response in time') => new DOMException(message, 'TimeoutError');

interface Answer {
  status: number;
  retryAfter: string | undefined;
  text: string;
}

/**
 * One request's handler, timer and answer in one object: its callbacks are the class's methods,
 * not closures made per request (a promise executor, a timer callback and six handler methods
 * each: about 1.4 KB allocated per delivery, a sixtieth of the whole path's).
 */
class Post implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null;
  private status = 0;
  private retryAfter: string | undefined = undefined;
  private chunks: Buffer[] | null = null;
  private size = 0;
  private settled = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly resolve: (answer: Answer) => void,
    private readonly reject: (error: Error) => void,
    timeoutMs: number,
  ) {
    this.timer = setTimeout(onTimeout, timeoutMs, this);
  }

  /**
   * The request's own timer ran out. Headers in but the body unfinished is no complete answer
   * either: a timeout like an endpoint that never answers (it held its slot as long), whatever
   * status it began with, so a 200 that stalls is not recorded as a success.
   */
  timedOut(): void {
    this.fail(
      this.status >= 200
        ? timeoutError(`no complete response in time (HTTP ${this.status} headers, body unfinished)`)
        : timeoutError(),
    );
    this.controller?.abort(timeoutError());
  }

  private text(): string {
    const chunks = this.chunks;
    if (chunks === null) return '';
    const whole = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.size);
    return whole.toString('utf8', 0, Math.min(whole.length, RESPONSE_LIMIT * 4)).slice(0, RESPONSE_LIMIT);
  }

  private answer(text: string): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.resolve({ status: this.status, retryAfter: this.retryAfter, text });
  }

  fail(error: Error): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.reject(error);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.settled) controller.abort(timeoutError());
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // 1xx informational answers come before the real one.
    if (statusCode < 200) return;
    this.status = statusCode;
    const value = headers['retry-after'];
    this.retryAfter = Array.isArray(value) ? value[0] : value;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    if (this.chunks === null) this.chunks = [chunk];
    else this.chunks.push(chunk);
    this.size += chunk.length;
    // Enough for the log; the rest is not worth receiving.
    if (this.size >= RESPONSE_LIMIT) {
      this.answer(this.text());
      controller.abort(new Error('response body past the logged limit'));
    }
  }

  onResponseEnd(): void {
    this.answer(this.text());
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    // An answer cut off mid-body is logged without its body, as a failed read always was; one cut
    // off by undici's body timeout (a backstop to the request's own timer) is a timeout.
    if (this.status < 200) this.fail(error);
    else if (isTimeoutError(error)) this.timedOut();
    else this.answer('');
  }
}

function onTimeout(post: Post): void {
  post.timedOut();
}

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
): Promise<Answer> {
  const { origin, path } = targetOf(url);
  return new Promise((resolve, reject) => {
    const handler = new Post(resolve, reject, timeoutMs);
    try {
      agent.dispatch(
        { origin, path, method: 'POST', headers, body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs },
        handler,
      );
    } catch (error) {
      handler.fail(error as Error);
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
