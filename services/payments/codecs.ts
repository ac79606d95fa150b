import type { PaymentPayload, PaymentRequired, PaymentRequirements, SettleResponse } from '@x402/core/types';
import { z } from 'zod';
import { invalidInput } from '../engine/operation-errors.ts';
import { v1NetworkName } from './rails.ts';

/**
 * Wire codecs of both x402 versions: v2 headers (`PAYMENT-SIGNATURE`, `PAYMENT-REQUIRED`,
 * `PAYMENT-RESPONSE`) and v1 (`X-PAYMENT`, the 402 JSON body, `X-PAYMENT-RESPONSE`). Both
 * carry base64 JSON; decoding is strict so a malformed header is refused with a reason.
 */

/**
 * A v2 payment header echoes the quote's `resource` and `extensions` (the bazaar's input and
 * output schemas and example): the official @x402/fetch client sent 5,668 characters for
 * get_market_regime, 8,364 for get_track_record and 8,620 for get_trade_call, which a 4,096 cap
 * refused. Under Node's 16 KiB for all of a request's headers, with room for the others.
 */
const MAX_PAYMENT_HEADER_CHARS = 12_288;

const Hex = z.string().regex(/^0x[0-9a-fA-F]*$/, 'hex');
const Uint = z.string().regex(/^\d+$/, 'a non-negative integer string');
const Eip3009Payload = z.object({
  signature: Hex,
  authorization: z.object({
    from: z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'an address'),
    to: z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'an address'),
    value: Uint,
    validAfter: Uint,
    validBefore: Uint,
    nonce: z.string().regex(/^0x[0-9a-fA-F]{64}$/, 'a bytes32 hex nonce'),
  }),
});
export type Eip3009Payload = z.infer<typeof Eip3009Payload>;

const V2Header = z.object({
  x402Version: z.literal(2),
  accepted: z.object({
    scheme: z.string(),
    network: z.string().regex(/^[^:]+:.+$/, 'a CAIP-2 network'),
    asset: z.string(),
    amount: z.string(),
    payTo: z.string(),
    maxTimeoutSeconds: z.number(),
    extra: z.record(z.string(), z.unknown()).default({}),
  }),
  payload: Eip3009Payload,
  resource: z.object({ url: z.string() }).loose().optional(),
  extensions: z.record(z.string(), z.unknown()).optional(),
});

const V1Header = z.object({
  x402Version: z.literal(1),
  scheme: z.string(),
  network: z.string(),
  payload: Eip3009Payload,
});

export type DecodedPayment =
  | { version: 2; payload: PaymentPayload; eip3009: Eip3009Payload }
  | { version: 1; scheme: string; network: string; eip3009: Eip3009Payload };

export type DecodeResult =
  | { ok: true; payment: DecodedPayment }
  | { ok: false; reason: string; message: string };

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

function decodeBase64Json(value: string): { ok: true; json: unknown } | { ok: false; message: string } {
  const trimmed = value.trim();
  if (trimmed.length === 0) {
    return {
      ok: false,
      message:
        'the payment header is empty; send the base64-encoded payment, or leave the header out to be quoted',
    };
  }
  if (trimmed.length % 4 !== 0 || !BASE64.test(trimmed)) {
    return { ok: false, message: 'the payment header is not base64' };
  }
  try {
    return { ok: true, json: JSON.parse(Buffer.from(trimmed, 'base64').toString('utf8')) };
  } catch {
    return { ok: false, message: 'the payment header is base64 but not JSON' };
  }
}

/** Reads the payment a request carries: v2 `PAYMENT-SIGNATURE` first, else v1 `X-PAYMENT`. */
export function decodePaymentHeader(headers: {
  paymentSignature: string | undefined;
  xPayment: string | undefined;
}): DecodeResult | null {
  const version = headers.paymentSignature !== undefined ? 2 : headers.xPayment !== undefined ? 1 : null;
  if (version === null) return null;
  const raw = (version === 2 ? headers.paymentSignature : headers.xPayment) as string;
  const name = version === 2 ? 'PAYMENT-SIGNATURE' : 'X-PAYMENT';
  if (raw.length > MAX_PAYMENT_HEADER_CHARS) {
    return {
      ok: false,
      reason: 'invalid_payment_header',
      message: `${name} is ${raw.length} characters; at most ${MAX_PAYMENT_HEADER_CHARS} are accepted`,
    };
  }
  // Base64 has no comma: one is where Node joined a header sent twice (a retry that appended it again).
  if (raw.includes(',')) {
    return {
      ok: false,
      reason: 'invalid_payment_header',
      message: `${name} was sent more than once; send one payment in one ${name} header`,
    };
  }
  const decoded = decodeBase64Json(raw);
  if (!decoded.ok)
    return { ok: false, reason: 'invalid_payment_header', message: `${name}: ${decoded.message}` };
  const other = otherVersion(version, decoded.json);
  if (other !== null) return { ok: false, reason: 'invalid_payment_header', message: other };
  return parsePayment(version, decoded.json, name, 'invalid_payment_header');
}

const HEADER_OF_VERSION = { 1: 'X-PAYMENT', 2: 'PAYMENT-SIGNATURE' } as const;

/**
 * A payment of the other x402 version in this header: the header is what is wrong, not the
 * payment, which the schema's field-by-field refusal ("x402Version must be exactly 1; got 2;
 * scheme is required…") would not tell.
 */
function otherVersion(version: 1 | 2, json: unknown): string | null {
  const sent = (json as { x402Version?: unknown } | null)?.x402Version;
  const wanted = version === 1 ? 2 : 1;
  if (typeof json !== 'object' || sent !== wanted) return null;
  return `${HEADER_OF_VERSION[version]} carries an x402 v${wanted} payment; send it in ${HEADER_OF_VERSION[wanted]} (${HEADER_OF_VERSION[version]} takes v${version})`;
}

function parsePayment(version: 1 | 2, json: unknown, name: string, reason: string): DecodeResult {
  // The header's refused fields, each worded as a refused body's: what it must be and what was sent.
  const refused = (error: z.ZodError, schema: z.ZodType): DecodeResult => ({
    ok: false,
    reason,
    message: `${name}: ${invalidInput(error, schema, json, '(header)').message}`,
  });
  if (version === 2) {
    const parsed = V2Header.safeParse(json);
    if (!parsed.success) return refused(parsed.error, V2Header);
    const payload = parsed.data as unknown as PaymentPayload;
    return { ok: true, payment: { version: 2, payload, eip3009: parsed.data.payload } };
  }
  const parsed = V1Header.safeParse(json);
  if (!parsed.success) return refused(parsed.error, V1Header);
  return {
    ok: true,
    payment: {
      version: 1,
      scheme: parsed.data.scheme,
      network: parsed.data.network,
      eip3009: parsed.data.payload,
    },
  };
}

const MCP_PAYMENT_NAME = '_meta["x402/payment"]';

/** Reads the payment of an MCP tool call (x402 MCP transport): a v2 PaymentPayload object, not base64. */
export function decodeMcpPayment(value: unknown): DecodeResult {
  if (JSON.stringify(value ?? null).length > MAX_PAYMENT_HEADER_CHARS) {
    return {
      ok: false,
      reason: 'invalid_payment',
      message: `${MCP_PAYMENT_NAME} is larger than ${MAX_PAYMENT_HEADER_CHARS} characters`,
    };
  }
  return parsePayment(2, value, MCP_PAYMENT_NAME, 'invalid_payment');
}

function toBase64Json(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
}

export function encodePaymentRequired(required: PaymentRequired): string {
  return toBase64Json(required);
}

/** The settlement response in the field names of the client's version. */
export function settlementResponse(version: 1 | 2, settle: SettleResponse): Record<string, unknown> {
  return {
    success: settle.success,
    transaction: settle.transaction,
    network: version === 1 ? (v1NetworkName(settle.network) ?? settle.network) : settle.network,
    payer: settle.payer,
    ...(settle.errorReason ? { errorReason: settle.errorReason } : {}),
  };
}

/** The settlement receipt header of the client's version. */
export function paymentResponseHeader(version: 1 | 2, settle: SettleResponse): [string, string] {
  return [
    version === 2 ? 'PAYMENT-RESPONSE' : 'X-PAYMENT-RESPONSE',
    toBase64Json(settlementResponse(version, settle)),
  ];
}

/** One payment requirement of the v1 402 body (`accepts`): what to sign for, to whom, in what. */
export const V1Requirement = z.object({
  scheme: z.string(),
  network: z.string(),
  maxAmountRequired: z.string().describe('The price in the asset’s smallest unit'),
  resource: z.string(),
  description: z.string(),
  mimeType: z.string(),
  payTo: z.string(),
  maxTimeoutSeconds: z.number().int(),
  asset: z.string(),
  extra: z.record(z.string(), z.unknown()),
});
export type V1Requirement = z.infer<typeof V1Requirement>;

/** The v1 402 body: the same quote, in v1 field names; rails without a v1 network name are v2-only. */
export function v1Accepts(
  requirements: PaymentRequirements[],
  resource: string,
  description: string,
): V1Requirement[] {
  return requirements.flatMap((r) => {
    const network = v1NetworkName(r.network);
    if (!network) return [];
    return [
      {
        scheme: r.scheme,
        network,
        maxAmountRequired: r.amount,
        resource,
        description,
        mimeType: 'application/json',
        payTo: r.payTo,
        maxTimeoutSeconds: r.maxTimeoutSeconds,
        asset: r.asset,
        extra: r.extra,
      },
    ];
  });
}
