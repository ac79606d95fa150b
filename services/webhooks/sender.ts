import { type Dispatcher, request } from 'undici';
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

async function readLimited(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buffer = chunk as Buffer;
    chunks.push(buffer);
    size += buffer.length;
    // Enough for the log; the rest is not worth receiving.
    if (size >= RESPONSE_LIMIT) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).toString('utf8').slice(0, RESPONSE_LIMIT);
}

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: string }).code;
  if (err.name === 'TimeoutError' || err.name === 'AbortError')
    return 'timeout: no complete response in time';
  return code ? `${code}: ${err.message}` : err.message;
}

/**
 * One signed POST. Only 2xx counts as success; 3xx is a failure (redirects are not followed),
 * like every 4xx/5xx, timeout and connection error. Never throws.
 */
export async function sendSigned(agent: Dispatcher, input: SendInput): Promise<SendResult> {
  const started = performance.now();
  const timestamp = Math.floor(Date.now() / 1000);
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'signal-service-webhooks/1',
    ...(input.seq ? { [SEQUENCE_HEADER]: String(input.seq) } : {}),
    [EVENT_VERSION_HEADER]: String(input.eventVersion ?? 1),
    ...signedHeaders({
      secret: input.secret,
      previousSecret: input.previousSecret ?? null,
      event: input.event,
      deliveryId: input.deliveryId,
      timestamp,
      rawBody: input.body,
    }),
  };
  try {
    const response = await request(input.url, {
      method: 'POST',
      dispatcher: agent,
      headers,
      body: input.body,
      signal: AbortSignal.timeout(input.timeoutMs),
      headersTimeout: input.timeoutMs,
      bodyTimeout: input.timeoutMs,
    });
    const text = await readLimited(response.body).catch(() => '');
    const status = response.statusCode;
    const ok = status >= 200 && status < 300;
    const retryAfter = response.headers['retry-after'];
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
      retryAfterMs: parseRetryAfter(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, Date.now()),
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
