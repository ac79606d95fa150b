import { z } from 'zod';
import type { WebhookEventType } from './events.ts';
import { jsonSchema } from './json-schema.ts';
import {
  RegimeShiftData,
  RiskShiftData,
  ScanDigestData,
  SubscriptionDisabledData,
  TradeCallData,
  WebhookEnvelope,
} from './webhooks.ts';

/**
 * Versioned webhook payloads. A subscription pins `event_version` at creation (the current one
 * unless it asks otherwise) and keeps receiving that version's payloads: a new version is added
 * here beside the old ones, never in place of them. Today every event type has one version, 1.
 */
export const CURRENT_EVENT_VERSION = 1;

export const WEBHOOK_PAYLOADS = {
  trade_call: { 1: TradeCallData },
  regime_shift: { 1: RegimeShiftData },
  scan_digest: { 1: ScanDigestData },
  subscription_disabled: { 1: SubscriptionDisabledData },
  risk_shift: { 1: RiskShiftData },
} as const satisfies Record<WebhookEventType, Record<number, z.ZodType>>;

/** Every version some event type has. */
export const EVENT_VERSIONS: readonly number[] = [
  ...new Set(Object.values(WEBHOOK_PAYLOADS).flatMap((versions) => Object.keys(versions).map(Number))),
].sort((a, b) => a - b);

/** The signed delivery body of one event type at one version. */
export function envelopeSchema(event: WebhookEventType, version: number): z.ZodType {
  const versions = WEBHOOK_PAYLOADS[event] as Record<number, z.ZodType>;
  const data = versions[version];
  if (!data) throw new Error(`${event} has no version ${version}`);
  return WebhookEnvelope.extend({ event: z.literal(event), event_version: z.literal(version), data });
}

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
          description: `Sent to subscriptions of ${event} pinned to event_version ${version}. Signed: X-Service-Signature (hex HMAC-SHA256 of {timestamp}.{rawBody}) and Standard Webhooks headers.`,
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
