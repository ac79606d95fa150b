import { z } from 'zod';
import { VolatilityDecile, WebhookEventType } from './events.ts';
import { TrackRecordBriefPayload } from './history.ts';
import { Call, Coin, Exchange, FeedKind, Regime, Timeframe } from './market.ts';
import { VerdictMeaning, VolatilityForecastSchema } from './signals.ts';

/**
 * Webhook management bodies (POST /api/webhooks and friends) and the payloads the dispatcher
 * POSTs to subscribers. Field names are snake_case on the wire, as in the contract.
 */

export const WEBHOOK_SECRET_PATTERN = /^whsec_[0-9a-f]{48}$/;
export const WebhookSecret = z.string().regex(WEBHOOK_SECRET_PATTERN);
export const Cadence = z.enum(['1h', '4h', '1d']);
export type Cadence = z.infer<typeof Cadence>;

const TOP_TOKEN = /^top:(\d{1,3})$/i;

/** `top:N` (N 1–100) or a coin symbol; symbols are upper-cased, the token lower-cased. */
export const AssetFilter = z.string().transform((raw, ctx) => {
  const value = raw.trim();
  const top = TOP_TOKEN.exec(value);
  if (top) {
    const n = Number(top[1]);
    if (n < 1 || n > 100) {
      ctx.addIssue({ code: 'custom', message: `top:N needs N in 1–100 (got ${n})` });
      return z.NEVER;
    }
    return `top:${n}`;
  }
  if (value.toLowerCase().startsWith('top:')) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is not top:N with N an integer 1–100` });
    return z.NEVER;
  }
  const coin = Coin.safeParse(value);
  if (!coin.success) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is neither a coin symbol nor top:N` });
    return z.NEVER;
  }
  return coin.data;
});

/** Parses `top:N` back into N; null for a plain symbol. */
export function topN(asset: string): number | null {
  const m = TOP_TOKEN.exec(asset);
  return m ? Number(m[1]) : null;
}

function unique<T>(values: T[]): boolean {
  return new Set(values).size === values.length;
}

/**
 * `assets` passes an event whose coin is listed or ranks in the top N (matching.ts): of two top:N
 * tokens the largest alone decides, so a second is refused rather than silently ignored. A top:N
 * beside coins is their union (a coin outside the top N is still taken), so that mix stays.
 */
function oneTopN(assets: string[], ctx: z.RefinementCtx): void {
  const tops = assets.filter((asset) => topN(asset) !== null);
  if (tops.length > 1) {
    ctx.addIssue({
      code: 'custom',
      message: `assets may hold one top:N (got ${tops.join(', ')}): an event passes when its coin is listed or ranks in the top N, so the largest alone decides`,
    });
  }
}

/** The events `timeframes` and `assets` filter. */
const FILTERED_EVENTS: readonly WebhookEventType[] = ['trade_call', 'regime_shift', 'risk_shift'];
const FILTERS_APPLY = 'applies only to trade_call, regime_shift and risk_shift';
/** The events `min_confidence` filters: the verdict events, and a digest's rows. */
const CONFIDENCE_EVENTS: readonly WebhookEventType[] = ['trade_call', 'regime_shift', 'scan_digest'];

/** `assets` as a subscription may hold them: those created before the one-top:N rule included. */
// Compared as parsed: symbols upper-cased, `top:N` lower-cased, so `btc` repeats `BTC`.
const heldAssets = z.array(AssetFilter).min(1).max(100).refine(unique, 'assets must not repeat');

/** What a subscription takes and where it sends: the create's fields, which PATCH changes too. */
const SUBSCRIPTION_FIELDS = {
  url: z.string().max(2048),
  events: z.array(WebhookEventType).min(1).refine(unique, 'events must not repeat'),
  timeframes: z.array(Timeframe).min(1).refine(unique, 'timeframes must not repeat').optional(),
  assets: heldAssets.superRefine(oneTopN).optional(),
  min_confidence: z.number().int().min(0).max(100).optional(),
  timeframe: Timeframe.optional(),
  exchange: Exchange.optional(),
  top_n: z.number().int().min(1).max(100).optional(),
  cadence: Cadence.optional(),
};

/** A subscription's settings as a whole, as created or as a PATCH leaves them. */
const SettingsObject = z.object(SUBSCRIPTION_FIELDS);
/** A create's optional fields may be null (no value, as when left out); the rules read both alike. */
type Settings = z.output<typeof SettingsObject>;
type SubscriptionSettings = Pick<Settings, 'url' | 'events'> & {
  [K in Exclude<keyof Settings, 'url' | 'events'>]?: Settings[K] | null;
};

/** The rules between fields, the same for a create and for what a PATCH leaves. */
function settingsRules(body: SubscriptionSettings, ctx: z.RefinementCtx): void {
  // `timeframes` and `assets` filter the market events; a subscription with none of them (a
  // digest, whose market set is its exchange, timeframe and top_n; a disabled notice) would
  // ignore them.
  if (!body.events.some((event) => FILTERED_EVENTS.includes(event))) {
    for (const field of ['timeframes', 'assets'] as const) {
      if (body[field] != null) {
        ctx.addIssue({ code: 'custom', path: [field], message: `${field} ${FILTERS_APPLY}` });
      }
    }
  }
  // A risk_shift's news is the forecast, not a verdict's confidence: alone it would ignore it.
  if (body.min_confidence != null && !body.events.some((e) => CONFIDENCE_EVENTS.includes(e))) {
    ctx.addIssue({
      code: 'custom',
      path: ['min_confidence'],
      message: 'min_confidence applies only to trade_call, regime_shift and scan_digest',
    });
  }
  // One refusal names every digest field at fault (the first is its `field`): a PATCH that drops
  // scan_digest from events must null all four, and is told so at once, not one field a call.
  const digest = body.events.includes('scan_digest');
  const wrong = DIGEST_FIELDS.filter((field) => (digest ? body[field] == null : body[field] != null));
  const [first, ...rest] = wrong;
  if (first !== undefined) {
    // Led by the field answered as `field` (the refusal's words lead with it).
    const many = rest.length > 1;
    const verb = digest ? (many ? 'are' : 'is') : many ? 'do' : 'does';
    const also = rest.length > 0 ? `, and so ${verb} ${listed(rest)}` : '';
    const fix = rest.length > 0 ? 'them' : 'it';
    ctx.addIssue({
      code: 'custom',
      path: [first],
      message: digest
        ? `${first} is required for scan_digest${also}`
        : `${first} applies only to scan_digest${also}: leave ${fix} out, or give ${fix} null in a PATCH`,
    });
  }
}

/** A scan_digest's own fields, required with it and refused without it. */
const DIGEST_FIELDS = ['timeframe', 'exchange', 'top_n', 'cadence'] as const;

/** "a", "a and b", "a, b and c". */
const listed = (names: readonly string[]) =>
  names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : (names[0] ?? '');

/** A create's optional field: null is no value, as when it is left out (a PATCH's null removes one). */
const orNone = <T extends z.ZodType>(field: z.ZodOptional<T>) =>
  field.unwrap().nullable().optional().describe('null: none, as when left out');

export const CreateWebhookRequest = z
  .strictObject({
    url: SUBSCRIPTION_FIELDS.url,
    events: SUBSCRIPTION_FIELDS.events,
    timeframes: orNone(SUBSCRIPTION_FIELDS.timeframes),
    assets: orNone(SUBSCRIPTION_FIELDS.assets),
    min_confidence: orNone(SUBSCRIPTION_FIELDS.min_confidence),
    timeframe: orNone(SUBSCRIPTION_FIELDS.timeframe),
    exchange: orNone(SUBSCRIPTION_FIELDS.exchange),
    top_n: orNone(SUBSCRIPTION_FIELDS.top_n),
    cadence: orNone(SUBSCRIPTION_FIELDS.cadence),
    event_version: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        "The payload version to receive, for every event type of the subscription, pinned for its life: one of GET /api/webhooks/schemas's `<event>.v<version>` (the highest by default); any other is refused (400 INVALID_FIELD)",
      ),
  })
  .superRefine(settingsRules);
export type CreateWebhookRequest = z.infer<typeof CreateWebhookRequest>;

/**
 * The settings a PATCH leaves, checked by the create's rules (the whole, not the patch). The
 * `assets` a PATCH gives meet the one-top:N rule in UpdateWebhookRequest; those it keeps were
 * checked at their create, so a subscription holding two top:N still takes a PATCH of its url.
 */
export const WebhookSettingsCheck = z
  .strictObject({ ...SUBSCRIPTION_FIELDS, assets: heldAssets.optional() })
  .superRefine(settingsRules);

const removable = <T extends z.ZodType>(field: z.ZodOptional<T>) =>
  field.unwrap().nullable().optional().describe('null removes the filter');

/**
 * `PATCH /api/webhooks/:id`: the fields to change, each as the create takes it; a filter given
 * `null` is removed. The rest stays. The secret has its own route (rotate-secret) and
 * `event_version` stays as created: a retry of a delivery sends the bytes of its first attempt,
 * made for the version pinned then.
 */
export const UpdateWebhookRequest = z
  .strictObject({
    url: SUBSCRIPTION_FIELDS.url.optional(),
    events: SUBSCRIPTION_FIELDS.events.optional(),
    timeframes: removable(SUBSCRIPTION_FIELDS.timeframes),
    assets: removable(SUBSCRIPTION_FIELDS.assets),
    min_confidence: removable(SUBSCRIPTION_FIELDS.min_confidence),
    timeframe: removable(SUBSCRIPTION_FIELDS.timeframe),
    exchange: removable(SUBSCRIPTION_FIELDS.exchange),
    top_n: removable(SUBSCRIPTION_FIELDS.top_n),
    cadence: removable(SUBSCRIPTION_FIELDS.cadence),
  })
  .refine((body) => Object.keys(body).length > 0, {
    message:
      'give at least one field to change: url, events, timeframes, assets, min_confidence, timeframe, exchange, top_n or cadence',
  });
export type UpdateWebhookRequest = z.infer<typeof UpdateWebhookRequest>;

/** `POST /api/webhooks/:id/disable` takes no field: one given is refused (INVALID_FIELD), never ignored. */
export const DisableWebhookRequest = z.strictObject({});

/**
 * A payload's `candle_close_time`: Unix seconds (the tools' `timestamp` unit), where the history
 * exports' `candle_close_time` (the same name) and /verify's `candleCloseTime` are milliseconds.
 */
const CandleCloseSeconds = z
  .number()
  .int()
  .describe(
    "Close time of the candle the verdict is for, in Unix seconds (not milliseconds: the history exports' candle_close_time and /verify's candleCloseTime are in ms, 1000 times this)",
  );

export const ReEnableWebhookRequest = z.strictObject({
  /**
   * Re-send every delivery of this subscription that failed at or after this time: an ISO 8601
   * date-time in UTC (`Z`) or with an offset (`+00:00`, as Python's `isoformat()` writes it).
   */
  recover_since: z.iso.datetime({ offset: true }).optional(),
});

/** `POST /api/webhooks/:id/test` takes no field: one given is refused (INVALID_FIELD), never ignored. */
export const TestWebhookRequest = z.strictObject({});

/** `POST /api/webhooks/:id/deliveries/:deliveryId/resend` takes no field either: one given is refused. */
export const ResendDeliveryRequest = z.strictObject({});

/**
 * `DELETE /api/webhooks/:id` takes no field either: one given (`{"force": true}`) is refused before
 * anything is deleted, as a query parameter it does not take is.
 */
export const DeleteWebhookRequest = z.strictObject({});

export const MAX_ROTATION_OVERLAP_SECONDS = 7 * 24 * 3_600;

export const RotateSecretRequest = z.strictObject({
  /** How long the previous secret keeps signing too; the configured overlap when omitted. */
  overlap_seconds: z.number().int().min(0).max(MAX_ROTATION_OVERLAP_SECONDS).optional(),
});

export const RotatedSecret = z.object({
  id: z.string(),
  secret: WebhookSecret,
  /** Until then deliveries carry signatures with both the new and the previous secret. */
  previous_secret_valid_until: z.string(),
});

export const SubscriptionStatus = z.enum(['active', 'disabled']);

export const WebhookView = z.object({
  id: z.string(),
  url: z.string(),
  events: z.array(WebhookEventType),
  timeframes: z.array(Timeframe).optional(),
  assets: z.array(z.string()).optional(),
  min_confidence: z.number().int().optional(),
  timeframe: Timeframe.optional(),
  exchange: Exchange.optional(),
  top_n: z.number().int().optional(),
  cadence: Cadence.optional(),
  status: SubscriptionStatus,
  /** The payload version this subscription receives (pinned at creation). */
  event_version: z.number().int().positive(),
  created_at: z.iso.datetime(),
  disabled_at: z.iso.datetime().nullable(),
  disabled_reason: z.string().nullable(),
  /** Last successful delivery; with `failing_since`, what a reviewer of a failing endpoint needs. */
  last_success_at: z.iso.datetime().nullable(),
  /**
   * First failed attempt since the last success; null while none failed since the last success, the
   * creation or the re-enable of the latest disable (an enable of an active subscription keeps it).
   */
  failing_since: z.string().nullable(),
});
export type WebhookView = z.infer<typeof WebhookView>;

/** The create response: the only time the secret is ever shown. */
export const CreatedWebhook = WebhookView.extend({ secret: WebhookSecret });

export const AttemptView = z.object({
  /**
   * The attempt's number among the delivery's requests (1, 2, 3…); null for an attempt held back
   * by an open circuit breaker, which sent nothing and does not use up the retry schedule.
   */
  attempt: z.number().int().nullable(),
  /** When the attempt was claimed (queued); `sent_at` is when its request went out. */
  attempted_at: z.iso.datetime(),
  sent_at: z.iso.datetime().nullable(),
  queued_ms: z.number().int().nullable(),
  trigger: z.string(),
  /** `held`: not sent, the endpoint's breaker was open; due again at `next_attempt_at` (its next probe). */
  outcome: z.enum(['pending', 'succeeded', 'failed', 'held']),
  status: z.number().int().nullable(),
  latency_ms: z.number().int().nullable(),
  error: z.string().nullable(),
  response: z.string().nullable(),
  next_attempt_at: z.iso.datetime().nullable(),
});

/** Two instants a delivery names, a few milliseconds apart: its event's (in the body) and its own (in the log). */
export const ENVELOPE_CREATED_AT =
  "When the event behind this delivery was recorded, on the wall clock (a trade_call's verdict, a regime_shift's or risk_shift's shift, a subscription_disabled's disable; a scan_digest: when the digest was built): the same for every subscription and on every retry, resend or recovery (X-Service-Timestamp is when an attempt was signed). The delivery log's created_at is when the delivery itself was recorded: a few milliseconds later, or, for one a re-enable recovered, at the recovery. The market times inside data (candle_close_time, period_start) are on the feed's clock, which a replay runs in the past.";
export const DELIVERY_CREATED_AT =
  "When this delivery was recorded (its first attempt claimed or queued), on the wall clock: a few milliseconds after the event behind it, or at the recovery for one a re-enable recovered. The delivered body's created_at is when that event was recorded.";

export const DeliveryView = z.object({
  delivery_id: z.string(),
  /** Per-subscription sequence number (null for deliveries made before sequencing existed). */
  seq: z.number().int().nullable(),
  event: WebhookEventType,
  event_id: z.string(),
  status: z.enum(['pending', 'succeeded', 'failed']),
  /** The delivery's instant, not its event's (the delivered body's created_at): see the description. */
  created_at: z.iso.datetime().describe(DELIVERY_CREATED_AT),
  attempts: z.array(AttemptView),
});
export type DeliveryView = z.infer<typeof DeliveryView>;

export const SendResultView = z.object({
  delivery_id: z.string(),
  delivered: z.boolean(),
  status: z.number().int().nullable(),
  latency_ms: z.number().int(),
  error: z.string().nullable(),
  response: z.string().nullable(),
});

// ---- payloads --------------------------------------------------------------------------------

/**
 * The forecast σ of the log return over the verdict horizon (percent) and the band beside it,
 * each field described in the words (and units) of the same field of a trade call's `volatility`
 * and a risk forecast's horizon, so the published payload schemas say percent and fraction too.
 */
const volatilityField = (name: keyof typeof VolatilityForecastSchema.shape) =>
  VolatilityForecastSchema.shape[name].description ?? '';
const ExpectedMove = z.object({
  horizon_candles: z.number().int().positive().describe(volatilityField('horizon_candles')),
  expected_move_pct: z.number().describe(volatilityField('expected_move_pct')),
  band_low: z.number().describe(volatilityField('band_low')),
  band_high: z.number().describe(volatilityField('band_high')),
  band_coverage: z.number().describe(volatilityField('band_coverage')),
});

/**
 * A payload's `lean`, in the words of every answer carrying a verdict, with both reasons it is null:
 * a verdict the service's engine did not record (an earlier engine version's) has no lean its
 * calibration table states, as `confidence_meaning` then says.
 */
const PayloadLean = VerdictMeaning.shape.lean.describe(
  'The direction the score leans (followed or faded as the cell says) and what following such leans earned after the fee before the test months: a HOLD says what it declines. Null when the score is exactly 0, or when an engine version other than the one serving recorded the verdict (its calibration table states no lean for that verdict; confidence_meaning names that engine).',
);

export const TradeCallData = z.object({
  type: z.literal('trade_call'),
  /** Which market feed the content came from: `replay` (recorded candles on an accelerated clock) or `live`. */
  feed: FeedKind,
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  call: Call.exclude(['HOLD']),
  confidence: z.number().int().min(0).max(100),
  regime: Regime,
  price_at_call: z.number(),
  /** Close time (Unix seconds) of the candle the call used. */
  candle_close_time: CandleCloseSeconds,
  signal_hash: z.string(),
  verify_url: z.url(),
  /** Forecast volatility and expected-move band over the verdict horizon. */
  expected_move: ExpectedMove.nullable()
    .optional()
    .describe(
      'Forecast σ of the log return over the verdict horizon and the band beside it. Null when the verdict was recorded without a volatility forecast.',
    ),
  /** The direction the call points as a lean, and what such leans earned after the fee. */
  lean: PayloadLean,
  /** What `confidence` means for this call, in words. */
  confidence_meaning: VerdictMeaning.shape.confidence_meaning,
  /**
   * How often calls of this exchange, timeframe and confidence bucket were right (revealed ones):
   * the line without the trade call's `holds` and `note`, which the published versions pin out.
   */
  track_record: TrackRecordBriefPayload.optional(),
});

/** The hash of the verdict behind a regime or risk shift. */
const SHIFT_SIGNAL_HASH = z
  .string()
  .nullable()
  .describe(
    'Hash of the verdict that carried the shift. Null if the dispatcher could not read that verdict from the event log.',
  );

export const RegimeShiftData = z.object({
  type: z.literal('regime_shift'),
  /** Which market feed the content came from: `replay` (recorded candles on an accelerated clock) or `live`. */
  feed: FeedKind,
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  regime: Regime,
  prior_regime: Regime,
  confidence: z
    .number()
    .int()
    .min(0)
    .max(100)
    .describe(
      "Confidence of the verdict that carried the shift (the figure min_confidence filters; for a HOLD, how often standing aside was right), not of the regime label: get_market_regime's confidence is the regime's",
    ),
  price_at_call: z.number(),
  candle_close_time: CandleCloseSeconds,
  signal_hash: SHIFT_SIGNAL_HASH,
  verify_url: z.url(),
});

/**
 * A market's forecast volatility entered or left its top or bottom decile: the verdict's forecast
 * percentile (its rank 0–100 among the market's recent forecasts) crossed into or out of ≥ 90
 * (`top`) or ≤ 10 (`bottom`) since the market's previous verdict.
 */
export const RiskShiftData = z.object({
  type: z.literal('risk_shift'),
  /** Which market feed the content came from: `replay` (recorded candles on an accelerated clock) or `live`. */
  feed: FeedKind,
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  /** The decile band the previous verdict's forecast was in, and this one's. */
  from: VolatilityDecile,
  to: VolatilityDecile,
  /** Rank (0–100) of this verdict's forecast among the market's recent forecasts, and the previous one's. */
  percentile: z.number().min(0).max(100),
  prior_percentile: z.number().min(0).max(100),
  /** The forecast behind the shift: σ of the log return over the verdict horizon and its band. */
  expected_move: ExpectedMove,
  /** The close the forecast was made at. */
  price: z.number(),
  /** Close time (Unix seconds) of the candle the forecast used. */
  candle_close_time: CandleCloseSeconds,
  signal_hash: SHIFT_SIGNAL_HASH,
  verify_url: z.url(),
});

/** One row of a digest (payload version 2 on): a market's latest verdict, ranked. */
export const DigestCall = z.object({
  rank: z.number().int().positive(),
  coin: z.string(),
  call: Call,
  confidence: z.number().int(),
  regime: Regime,
  price: z.number(),
  /** Close time (Unix seconds) of the candle this row's verdict is for, as a trade_call's. */
  candle_close_time: CandleCloseSeconds,
  /** The VerdictRecorded event behind the call. */
  verdict_id: z.string(),
  /** Forecast σ of the log return over the verdict horizon, percent; null without a forecast. */
  expected_move_pct: z
    .number()
    .nullable()
    .optional()
    .describe(
      `${volatilityField('expected_move_pct')} Null when the row's verdict was recorded without a volatility forecast.`,
    ),
  /** The direction a call would point and what such leans earned (a HOLD says what it declines). */
  lean: PayloadLean,
  /** What `confidence` means for this row, in words (HOLD included). */
  confidence_meaning: VerdictMeaning.shape.confidence_meaning,
});

export const ScanDigestData = z.object({
  type: z.literal('scan_digest'),
  /** Which market feed the content came from: `replay` (recorded candles on an accelerated clock) or `live`. */
  feed: FeedKind,
  cadence: Cadence,
  timeframe: Timeframe,
  exchange: Exchange,
  /** Start of the cadence period (ISO time) this digest covers. */
  period_start: z.string(),
  /** Every top-N market's latest verdict (of the close at `period_start` or later), HOLD included, ranked; the markets not here are in `skipped`. */
  calls: z.array(DigestCall),
  /** The top-N markets not in `calls`, and why (no verdict recorded yet, or only of an earlier close; below `min_confidence`). */
  skipped: z.array(z.object({ coin: z.string(), reason: z.string() })),
  /** Present when `calls` is empty, or when the venue ranks fewer markets than top_n: why, in words. */
  note: z
    .string()
    .optional()
    .describe(
      'Present when calls is empty (why), or when the venue ranks fewer markets than top_n (saying how many: calls and skipped then hold them all); absent otherwise',
    ),
});

/**
 * Payload version 1 of a digest: its rows carry no `candle_close_time` (the shape published as
 * `scan_digest.v1`, pinned in webhook-payload-shapes.json).
 */
export const DigestCallV1 = DigestCall.omit({ candle_close_time: true });
export const ScanDigestDataV1 = ScanDigestData.extend({ calls: z.array(DigestCallV1) });

/** One of the key's subscriptions was disabled; delivered to its other subscriptions that ask for it. */
export const SubscriptionDisabledData = z.object({
  type: z.literal('subscription_disabled'),
  subscription_id: z.string(),
  url: z.string(),
  reason: z.string(),
  /** An ISO 8601 instant; typed as the published version 1 typed it (webhook-payload-shapes.json). */
  disabled_at: z.string(),
  consecutive_failures: z.number().int().nonnegative(),
});

export const WebhookData = z.discriminatedUnion('type', [
  TradeCallData,
  RegimeShiftData,
  ScanDigestData,
  SubscriptionDisabledData,
  RiskShiftData,
]);
export type WebhookData = z.infer<typeof WebhookData>;

export const WebhookEnvelope = z.object({
  event: WebhookEventType,
  delivery_id: z.string(),
  /**
   * Per-subscription sequence number, 1, 2, 3…: a gap means a missed delivery, fetched with
   * GET /api/webhooks/:id/deliveries?after_seq=. Absent on test deliveries.
   */
  seq: z.number().int().positive().optional(),
  /** The payload version of `data` (the subscription's pinned `event_version`). */
  event_version: z.number().int().positive().optional(),
  /** The event's instant, not the delivery's (the delivery log's created_at): see the description. */
  // An ISO 8601 instant, typed as the published payload versions typed it (webhook-payload-shapes.json):
  // a format added here changes every published version's shape.
  created_at: z.string().describe(ENVELOPE_CREATED_AT),
  /** True only for POST /api/webhooks/:id/test deliveries. */
  test: z.boolean().optional(),
  data: WebhookData,
});
export type WebhookEnvelope = z.infer<typeof WebhookEnvelope>;
