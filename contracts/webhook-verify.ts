import { createHmac, createSecretKey, type KeyObject, timingSafeEqual } from 'node:crypto';

/**
 * Webhook signatures, for the service (signing) and for subscribers (verifying).
 *
 * Contract headers: `X-Service-Signature` = hex HMAC-SHA256 over `{timestamp}.{rawBody}` keyed
 * with the subscription secret exactly as shown at creation (the whole `whsec_…` string, UTF-8).
 * Standard Webhooks headers are sent beside them (`webhook-id`, `webhook-timestamp`,
 * `webhook-signature: v1,<base64>`), keyed the Standard Webhooks way (the base64 decoding of the
 * part after `whsec_`), so `new Webhook(secret).verify(body, headers)` from the
 * `standardwebhooks` package accepts them as is.
 *
 * Receiver example (node:http; read the raw body, never a re-serialised one):
 *
 *   import { verifyWebhook } from './contracts/webhook-verify.ts';
 *   const result = verifyWebhook({ secret: process.env.WEBHOOK_SECRET!, headers: req.headers, rawBody });
 *   if (!result.ok) return res.writeHead(400).end(result.reason);
 *   if (alreadyHandled(result.deliveryId)) return res.writeHead(200).end(); // redeliveries keep the id
 *   handle(JSON.parse(rawBody));
 *   res.writeHead(200).end();
 */

export const DEFAULT_TOLERANCE_SECONDS = 300;

/**
 * The delivery's per-subscription sequence number, also in the signed body as `seq` (trust the
 * body's, which the signature covers; the header is for routing before parsing).
 */
export const SEQUENCE_HEADER = 'x-service-sequence';

/** The payload version of the body (the subscription's pinned `event_version`; also in the body). */
export const EVENT_VERSION_HEADER = 'x-service-event-version';

export const SIGNATURE_HEADERS = {
  event: 'x-service-event',
  delivery: 'x-service-delivery',
  timestamp: 'x-service-timestamp',
  signature: 'x-service-signature',
  /**
   * During a secret rotation's overlap: the signature with the new secret, while
   * `x-service-signature` keeps the previous one (so a receiver still holding it goes on working).
   */
  signatureNew: 'x-service-signature-new',
} as const;

/**
 * hex HMAC-SHA256 of `{timestamp}.{rawBody}` keyed with the secret string. The body may be given
 * as its UTF-8 bytes (a sender that encodes it once for the request and both signatures).
 */
export function serviceSignature(secret: string, timestamp: number, rawBody: string | Uint8Array): string {
  return createHmac('sha256', keyOf(secret, 'service'))
    .update(`${timestamp}.`, 'utf8')
    .update(rawBody)
    .digest('hex');
}

/** Keys made from secrets already seen, per scheme; bounded, as a sender meets few secrets. */
const keys = { service: new Map<string, KeyObject>(), standard: new Map<string, KeyObject>() };
const MAX_KEYS = 10_000;

/**
 * The HMAC key of `secret` in one scheme, made once: handing `createHmac` the string (or the
 * base64-decoded bytes) imports it as a key on every call, about half of a delivery's signing time.
 */
function keyOf(secret: string, scheme: keyof typeof keys): KeyObject {
  const cache = keys[scheme];
  let key = cache.get(secret);
  if (key === undefined) {
    key = createSecretKey(
      scheme === 'service'
        ? Buffer.from(secret, 'utf8')
        : Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64'),
    );
    if (cache.size >= MAX_KEYS) cache.clear();
    cache.set(secret, key);
  }
  return key;
}

/** Standard Webhooks `webhook-signature` value: `v1,` + base64 HMAC of `{id}.{timestamp}.{body}`. */
export function standardSignature(
  secret: string,
  id: string,
  timestamp: number,
  rawBody: string | Uint8Array,
): string {
  const key = keyOf(secret, 'standard');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.`, 'utf8').update(rawBody).digest('base64')}`;
}

/**
 * Every header a delivery carries besides Content-Type. With `previousSecret` (a rotation's
 * overlap) both secrets sign: `x-service-signature` with the previous one and
 * `x-service-signature-new` with the new one; `webhook-signature` lists both, space-separated, as
 * Standard Webhooks allows.
 */
export function signedHeaders(input: {
  secret: string;
  previousSecret?: string | null;
  event: string;
  deliveryId: string;
  timestamp: number;
  rawBody: string | Uint8Array;
}): Record<string, string> {
  const standard = (secret: string) =>
    standardSignature(secret, input.deliveryId, input.timestamp, input.rawBody);
  const previous = input.previousSecret ?? null;
  return {
    [SIGNATURE_HEADERS.event]: input.event,
    [SIGNATURE_HEADERS.delivery]: input.deliveryId,
    [SIGNATURE_HEADERS.timestamp]: String(input.timestamp),
    [SIGNATURE_HEADERS.signature]: serviceSignature(previous ?? input.secret, input.timestamp, input.rawBody),
    ...(previous !== null
      ? {
          [SIGNATURE_HEADERS.signatureNew]: serviceSignature(input.secret, input.timestamp, input.rawBody),
        }
      : {}),
    'webhook-id': input.deliveryId,
    'webhook-timestamp': String(input.timestamp),
    'webhook-signature':
      previous === null ? standard(input.secret) : `${standard(input.secret)} ${standard(previous)}`,
  };
}

export type VerifyResult =
  | { ok: true; event: string; deliveryId: string; timestamp: number }
  | {
      ok: false;
      reason: 'missing_header' | 'bad_timestamp' | 'outside_tolerance' | 'bad_signature' | 'header_mismatch';
    };

type HeaderBag = Record<string, string | string[] | undefined> | Headers;

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const bag = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(bag).find((k) => k.toLowerCase() === name);
  const value = key === undefined ? undefined : bag[key];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Checks a delivery before its body is trusted: the timestamp within `toleranceSeconds` of now
 * (stops replays) and the signature, compared in constant time. The signature covers the
 * timestamp and the body only, so `event` and `deliveryId` are read from the signed body, and a
 * delivery whose `X-Service-Event` or `X-Service-Delivery` header says otherwise is refused
 * (`header_mismatch`): a captured delivery sent again within the tolerance under a new
 * `X-Service-Delivery` must not pass a receiver's check of the ids it has handled.
 */
export function verifyWebhook(input: {
  secret: string;
  headers: HeaderBag;
  rawBody: string | Buffer;
  toleranceSeconds?: number;
  /** Unix seconds; defaults to the clock. */
  now?: number;
}): VerifyResult {
  const timestampRaw = header(input.headers, SIGNATURE_HEADERS.timestamp);
  const signature = header(input.headers, SIGNATURE_HEADERS.signature);
  const deliveryId = header(input.headers, SIGNATURE_HEADERS.delivery);
  const event = header(input.headers, SIGNATURE_HEADERS.event);
  if (!timestampRaw || !signature || !deliveryId || !event) return { ok: false, reason: 'missing_header' };
  if (!/^\d{1,12}$/.test(timestampRaw)) return { ok: false, reason: 'bad_timestamp' };
  const timestamp = Number(timestampRaw);
  const now = input.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - timestamp) > (input.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) {
    return { ok: false, reason: 'outside_tolerance' };
  }
  const body = typeof input.rawBody === 'string' ? input.rawBody : input.rawBody.toString('utf8');
  const expected = Buffer.from(serviceSignature(input.secret, timestamp, body), 'utf8');
  // During a rotation's overlap the new secret's signature travels in its own header.
  const candidates = [signature, header(input.headers, SIGNATURE_HEADERS.signatureNew)];
  const matches = candidates.some((candidate) => {
    if (candidate === undefined) return false;
    const given = Buffer.from(candidate.trim().toLowerCase(), 'utf8');
    // Lengths differ only for malformed input; timingSafeEqual needs equal lengths.
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!matches) return { ok: false, reason: 'bad_signature' };
  const signed = signedIds(body);
  if (signed === null || signed.deliveryId !== deliveryId || signed.event !== event) {
    return { ok: false, reason: 'header_mismatch' };
  }
  return { ok: true, event: signed.event, deliveryId: signed.deliveryId, timestamp };
}

/** The `event` and `delivery_id` a signed body carries (every delivery's does), else null. */
function signedIds(body: string): { event: string; deliveryId: string } | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const { event, delivery_id } = parsed as { event?: unknown; delivery_id?: unknown };
  return typeof event === 'string' && typeof delivery_id === 'string'
    ? { event, deliveryId: delivery_id }
    : null;
}
