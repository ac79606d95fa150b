import { z } from 'zod';
import type { WebhookEventType } from './events.ts';
import { jsonSchema } from './json-schema.ts';
import { EVENT_VERSION_HEADER, SEQUENCE_HEADER, SIGNATURE_HEADERS } from './webhook-verify.ts';
import {
  RegimeShiftData,
  RiskShiftData,
  ScanDigestData,
  ScanDigestDataV1,
  SubscriptionDisabledData,
  TradeCallData,
  WebhookEnvelope,
} from './webhooks.ts';

/**
 * Versioned webhook payloads. A subscription pins one `event_version` at creation (the current one
 * unless it asks otherwise) for all its event types, and keeps receiving that version's payloads:
 * a new version is added here beside the old ones, never in place of them, and covers every event
 * type (a type it does not change keeps the earlier version's data), so any version a subscription
 * may pin holds for whichever events it takes, at creation or after a PATCH of `events`.
 */
export const CURRENT_EVENT_VERSION = 2;

export const WEBHOOK_PAYLOADS = {
  trade_call: { 1: TradeCallData, 2: TradeCallData },
  regime_shift: { 1: RegimeShiftData, 2: RegimeShiftData },
  scan_digest: { 1: ScanDigestDataV1, 2: ScanDigestData },
  subscription_disabled: { 1: SubscriptionDisabledData, 2: SubscriptionDisabledData },
  risk_shift: { 1: RiskShiftData, 2: RiskShiftData },
} as const satisfies Record<WebhookEventType, Record<number, z.ZodType>>;

/** What each version changed, as the `webhooks` section says it. */
export const VERSION_CHANGES: Readonly<Record<number, string>> = {
  1: 'The first published version.',
  2: 'Version 1, with `candle_close_time` (Unix seconds) on every scan_digest row; the other event types carry the data of version 1.',
};

/** The payload versions a subscription may pin: those every event type has. */
export const EVENT_VERSIONS: readonly number[] = Object.values(WEBHOOK_PAYLOADS)
  .map((versions) => Object.keys(versions).map(Number))
  .reduce((common, versions) => common.filter((v) => versions.includes(v)))
  .sort((a, b) => a - b);

/** The signed delivery body of one event type at one version. */
export function envelopeSchema(event: WebhookEventType, version: number): z.ZodType {
  const versions = WEBHOOK_PAYLOADS[event] as Record<number, z.ZodType>;
  const data = versions[version];
  if (!data) throw new Error(`${event} has no version ${version}`);
  return WebhookEnvelope.extend({ event: z.literal(event), event_version: z.literal(version), data });
}

/**
 * Every header a delivery carries besides Content-Type and User-Agent, as the `webhooks` section
 * describes them (header parameters of each delivery); `required`: on every delivery.
 */
export const DELIVERY_HEADERS: readonly { name: string; required: boolean; description: string }[] = [
  { name: SIGNATURE_HEADERS.event, required: true, description: 'The event type (the body’s `event`)' },
  {
    name: SIGNATURE_HEADERS.delivery,
    required: true,
    description:
      'The delivery id (the body’s `delivery_id`): the same on a retry or resend, your idempotency key',
  },
  {
    name: SIGNATURE_HEADERS.timestamp,
    required: true,
    description: 'Unix seconds when this attempt was signed; refuse one far from your clock (5 minutes)',
  },
  {
    name: SIGNATURE_HEADERS.signature,
    required: true,
    description:
      'Hex HMAC-SHA256 of `{timestamp}.{rawBody}` keyed with the secret string; during a rotation’s overlap, the previous secret’s',
  },
  {
    name: SIGNATURE_HEADERS.signatureNew,
    required: false,
    description: 'During a secret rotation’s overlap only: the same signature with the new secret',
  },
  {
    name: SEQUENCE_HEADER,
    required: false,
    description:
      'The per-subscription sequence number (the body’s `seq`, which the signature covers) for gap detection; not on test deliveries',
  },
  {
    name: EVENT_VERSION_HEADER,
    required: true,
    description: 'The payload version (the body’s `event_version`, pinned at creation)',
  },
  { name: 'webhook-id', required: true, description: 'Standard Webhooks: the delivery id' },
  { name: 'webhook-timestamp', required: true, description: 'Standard Webhooks: Unix seconds, as signed' },
  {
    name: 'webhook-signature',
    required: true,
    description:
      'Standard Webhooks: `v1,<base64 HMAC-SHA256>` of `{id}.{timestamp}.{body}`; during a rotation’s overlap two, space-separated (new first)',
  },
];

/**
 * The `webhooks` section of an OpenAPI 3.1 document (JSON Schema 2020-12 from the zod contracts),
 * one entry per event type and version, named `<event>.v<version>`; the service's OpenAPI document
 * (GET /openapi.json) carries it as its `webhooks`.
 */
export function webhookOpenApi(): Record<string, unknown> {
  const webhooks: Record<string, unknown> = {};
  for (const [event, versions] of Object.entries(WEBHOOK_PAYLOADS)) {
    for (const version of Object.keys(versions).map(Number)) {
      const schema = jsonSchema(envelopeSchema(event as WebhookEventType, version), 'output');
      webhooks[`${event}.v${version}`] = {
        post: {
          summary: `${event}, payload version ${version}`,
          description: `Sent to subscriptions of ${event} pinned to event_version ${version}${version === CURRENT_EVENT_VERSION ? ' (the default of a new subscription)' : ''}. ${VERSION_CHANGES[version]} Signed: X-Service-Signature (hex HMAC-SHA256 of {timestamp}.{rawBody}) and Standard Webhooks headers.`,
          parameters: DELIVERY_HEADERS.map(({ name, required, description }) => ({
            name,
            in: 'header',
            required,
            description,
            schema: { type: 'string' },
          })),
          requestBody: { required: true, content: { 'application/json': { schema } } },
          responses: {
            '2XX': { description: 'Delivered; anything else is retried on the schedule (410 disables).' },
          },
        },
      };
    }
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Signal service webhooks', version: String(CURRENT_EVENT_VERSION) },
    webhooks,
  };
}
