import { z } from 'zod';
import type { NewEvent, RecordedEvent } from './envelope.ts';
import { Call, Exchange, FeedKind, Regime, Timeframe } from './market.ts';
import { CLEAN, compileCheck, INVALID } from './zod-check.ts';

/**
 * The event catalog: every fact the service records. Later issues may add optional fields to
 * a payload; they never change the envelope (contracts/envelope.ts) or remove a field, because
 * old events are replayed forever.
 */

/** Money is integer atomic units (USDC: 6 decimals), carried as a decimal string. */
const AtomicAmount = z.string().regex(/^\d+$/, 'atomic units, a non-negative integer string');
const Hex = z.string().regex(/^0x[0-9a-fA-F]*$/);
const IsoTime = z.iso.datetime();

const MarketFields = {
  exchange: Exchange,
  coin: z.string().min(1).max(20),
  timeframe: Timeframe,
};

type InputValue = number | string | boolean | null;
const isInputValue = (v: unknown) =>
  v === null ||
  typeof v === 'string' ||
  typeof v === 'boolean' ||
  (typeof v === 'number' && Number.isFinite(v));
/**
 * A record of finite numbers, strings, booleans and nulls, checked in one loop: the equivalent
 * `z.record(z.string(), z.union([...]))` cost about 1 µs a key, most of a verdict's validation
 * when a rebuild reads the log back.
 */
const VerdictInputs = z.custom<Record<string, InputValue>>(
  (v) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
    // Object.values(v).every(isInputValue) without the array it builds (a rebuild checks
    // millions of these): the own enumerable string keys, as Object.values takes them.
    for (const k in v) {
      if (Object.hasOwn(v, k) && !isInputValue((v as Record<string, unknown>)[k])) return false;
    }
    return true;
  },
  { message: 'inputs: a record of finite numbers, strings, booleans or nulls' },
);

export const VerdictRecorded = z.object({
  ...MarketFields,
  call: Call,
  confidence: z.number().int().min(0).max(100),
  /** Raw composite score in [-1, 1] before calibration. */
  score: z.number().min(-1).max(1),
  regime: Regime,
  price: z.number().positive(),
  /** Close time (Unix ms) of the last closed candle the verdict used. */
  candleCloseTime: z.number().int(),
  feed: FeedKind,
  engineVersion: z.string(),
  /** Summary of the inputs: indicator readings, votes, funding, basis. */
  inputs: VerdictInputs,
  /** sha256 over the canonical verdict content plus prevHash: a per-market hash chain. */
  hash: z.string().regex(/^[0-9a-f]{64}$/),
  prevHash: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .nullable(),
  /** What produced it: a customer call or the scheduler. */
  trigger: z.enum(['request', 'schedule']),
});

/**
 * The labels of a revealed verdict, from the candles of the same feed that followed it: one
 * event per verdict, hash-linked to it, once its longest horizon has closed.
 */
export const VerdictOutcomeResolved = z.object({
  ...MarketFields,
  verdictId: z.uuid(),
  verdictStream: z.string(),
  verdictRevision: z.number().int().nonnegative(),
  /** The verdict's chain hash: the outcome names exactly the content it labels. */
  verdictHash: z.string().regex(/^[0-9a-f]{64}$/),
  call: Call,
  confidence: z.number().int().min(0).max(100),
  candleCloseTime: z.number().int(),
  feed: FeedKind,
  price: z.number().positive(),
  /** Forward return (fraction) from the verdict's close to the close 1, 6 and 24 candles later. */
  return1: z.number(),
  return6: z.number(),
  return24: z.number(),
  /** At the methodology's horizon and fee: the call's direction beat the fee, or not; HOLD is no-call. */
  result: z.enum(['hit', 'miss', 'no-call']),
  feeBps: z.number().nonnegative(),
  horizonCandles: z.number().int().positive(),
  /** Return in the call's direction after the fee, in hundredths of a bp (integer); null for HOLD. */
  netCentiBps: z.number().int().nullable(),
  /** Largest move against / for the call within the horizon, in bps; null for HOLD. */
  maeBps: z.number().nullable(),
  mfeBps: z.number().nullable(),
  /** Standard deviation of the 24 close-to-close log returns after the verdict (per candle). */
  realisedVol: z.number().nonnegative(),
  /**
   * The direction the verdict's score leaned (HOLD included) as its engine's table states it;
   * null when it leaned nowhere or its engine is not the table's. Absent on outcomes resolved
   * before the field existed.
   */
  lean: z.enum(['BUY', 'SELL']).nullable().optional(),
  /** Following the lean over the horizon after the fee, hundredths of a bp; null without a lean. */
  leanNetCentiBps: z.number().int().nullable().optional(),
  /**
   * The risk forecast the verdict served, as recorded in its inputs, to be scored against these
   * returns; null on verdicts recorded without one.
   */
  volatility: z
    .object({
      horizonCandles: z.number().int().positive(),
      expectedMovePct: z.number().nonnegative(),
      bandLow: z.number().positive(),
      bandHigh: z.number().positive(),
      bandCoverage: z.number().min(0).max(1),
    })
    .nullable()
    .optional(),
  /**
   * The looped lap of a replay the verdict or its labels fell in, as its inputs record it
   * (contracts/history.ts REPLAY_LAP_INPUT): such an outcome is no track record. Absent otherwise.
   */
  replayLap: z.number().int().positive().optional(),
  /**
   * The outcome's own link in its market's outcome chain (contracts/verdict-hash.ts `outcomeHash`):
   * sha256 over the labels an export carries, this outcome's verdict hash and `prevHash`, the
   * previous chained outcome of the same verdict stream (null: the chain's first). Absent on
   * outcomes resolved before outcomes were chained.
   */
  hash: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
  prevHash: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .nullable()
    .optional(),
});

export const RegimeShifted = z.object({
  ...MarketFields,
  from: Regime,
  to: Regime,
  confidence: z.number().int().min(0).max(100),
  price: z.number().positive(),
  candleCloseTime: z.number().int(),
  feed: FeedKind,
  verdictEventId: z.uuid(),
});

/**
 * Where a forecast's percentile (its rank 0–100 among the market's recent forecasts) sits:
 * `top` decile at 90 or above, `bottom` at 10 or below, `middle` between.
 */
export const VolatilityDecile = z.enum(['top', 'middle', 'bottom']);
export type VolatilityDecile = z.infer<typeof VolatilityDecile>;

/**
 * A market's forecast volatility entered or left its top or bottom decile with this verdict
 * (recorded in the same append, after it and after its RegimeShifted if any).
 */
export const RiskShifted = z.object({
  ...MarketFields,
  from: VolatilityDecile,
  to: VolatilityDecile,
  /** The verdict's forecast percentile, and the previous verdict's. */
  percentile: z.number().min(0).max(100),
  priorPercentile: z.number().min(0).max(100),
  /** Forecast σ of the log return over the verdict horizon, percent, and its band. */
  expectedMovePct: z.number().nonnegative(),
  bandLow: z.number().positive(),
  bandHigh: z.number().positive(),
  bandCoverage: z.number().min(0).max(1),
  horizonCandles: z.number().int().positive(),
  price: z.number().positive(),
  candleCloseTime: z.number().int(),
  feed: FeedKind,
  verdictEventId: z.uuid(),
});

const PaymentRef = {
  /** ERC-3009 authorisation nonce (bytes32 hex); unique per (network, asset, payer): see paymentStream. */
  nonce: Hex,
  network: z.string(),
  asset: Hex,
};

export const PaymentAuthorized = z.object({
  ...PaymentRef,
  payer: Hex,
  payTo: Hex,
  amount: AtomicAmount,
  resource: z.string(),
  x402Version: z.union([z.literal(1), z.literal(2)]),
  validAfter: z.string(),
  validBefore: z.string(),
  requestId: z.string(),
  /** The sold operation the payment was for. */
  tool: z.string().optional(),
  /**
   * The payer's ERC-3009 signature of this authorisation, kept so that reconciliation can
   * broadcast the settlement again when the one sent never landed (it moves funds only to payTo,
   * for amount, within validAfter..validBefore, once).
   */
  signature: Hex.optional(),
  /**
   * The x402 `payment-identifier` id the payment was made under (the client's idempotency key;
   * one live payment per payer and id: see PaymentIdentifierClaimed). Absent on older events.
   */
  paymentId: z.string().min(1).max(128).optional(),
  /** sha256 of the tool and its canonical arguments: what was bought. Absent on older events. */
  fingerprint: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
/** A paid answer as the log keeps it: the tool's result (a JSON object), without `_service`. */
const PaidAnswer = z.custom<Record<string, unknown>>(
  (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
  { message: 'answer: a JSON object' },
);
export const PaymentSettlementPending = z.object({
  ...PaymentRef,
  submittedAt: IsoTime,
  txHash: Hex.optional(),
  /** Why the outcome is not known yet (e.g. the receipt did not arrive in time). */
  reason: z.string().optional(),
  /**
   * The paid answer, kept when the payment is handed to settlement (before anything is sent), so
   * a payer charged for it can fetch it again whatever happens to this process. Absent on the
   * pending records that follow, and on hand-offs recorded before answers were kept.
   */
  answer: PaidAnswer.optional(),
});
/**
 * The paid answer was handed to a caller: the request that paid, or the same payment (or payment
 * id) presented again. Until one is recorded, an authorisation that expires unsettled charged
 * nothing and cost the seller nothing. Carries the answer when the log did not hold it yet (a
 * payment handed off before answers were kept, answered again now).
 */
export const PaymentAnswerServed = z.object({
  ...PaymentRef,
  requestId: z.string(),
  /** The settlement transaction the caller was told, when one was. */
  txHash: Hex.optional(),
  answer: PaidAnswer.optional(),
});
/**
 * A payer's x402 `payment-identifier` id bound to the payment that uses it, on the id's own
 * stream (x402-payment-id-<hash>): one live payment per payer and id, on every replica and across
 * restarts. Claimed again only once the payment it names was released or failed (charged nothing).
 */
export const PaymentIdentifierClaimed = z.object({
  ...PaymentRef,
  payer: Hex,
  paymentId: z.string().min(1).max(128),
  fingerprint: z.string().regex(/^[0-9a-f]{64}$/),
  tool: z.string(),
});
export const PaymentSettled = z.object({
  ...PaymentRef,
  payer: Hex,
  amount: AtomicAmount,
  txHash: Hex,
  /** Set when reconciliation, not the request that carried the payment, found the settlement. */
  reconciled: z.boolean().optional(),
});
export const PaymentSettlementFailed = z.object({
  ...PaymentRef,
  reason: z.string(),
  txHash: Hex.optional(),
  reconciled: z.boolean().optional(),
  /** The answer was served (the settlement had been handed off) and is never paid: the seller's loss. */
  sellerLoss: z.boolean().optional(),
});
export const PaymentReleased = z.object({ ...PaymentRef, reason: z.string() });

export const Plan = z.enum(['free', 'starter', 'pro']);
export type Plan = z.infer<typeof Plan>;

/** What every debit record holds: whose calls, of which tool, how many, counted against which windows. */
const DebitFields = {
  /** Hash of the API key, or of the anonymous client's address. */
  subject: z.string(),
  subjectKind: z.enum(['key', 'anonymous']),
  plan: Plan,
  tool: z.string(),
  units: z.number().int().positive(),
  /** UTC day (YYYY-MM-DD) and month (YYYY-MM) the debit counts against. */
  day: z.string().regex(/^\d{4}-\d{2}-\d{2}$/),
  month: z.string().regex(/^\d{4}-\d{2}$/),
  /**
   * The generation of the quota counters the debit was counted in. A rebuild that switches
   * generations replays the debits counted in any other one, and only those.
   */
  generation: z.string().optional(),
};

/** One call's debit, as logs written before QuotaDebitsRecorded hold them (still folded). */
export const QuotaDebited = z.object({ ...DebitFields, requestId: z.string() });

/**
 * What QuotaMeter writes: one call's debit (`units` 1), or the units a busy subject's lease prepays
 * for its next calls of any tool, recorded under the tool of the call that opened it (their unused
 * part comes back as QuotaDebitsReturned); counted in one generation, day and plan. A rebuild folds
 * `units` like QuotaDebited's. No request id: the counters need only the units, and the flat shape
 * is checked by the compiled validator without zod. (Logs written before hold batches of several
 * calls of one tool in one event, folded the same way.)
 */
export const QuotaDebitsRecorded = z.object(DebitFields);

/**
 * Units of a subject's prepaid debits that no call took, given back when its lease ends (see
 * QuotaMeter): a rebuild folds `units` as a debit taken back. `generation` is the generation they
 * were given back on (the live one then, as on ChatQuotaRefunded), not the one the lease was
 * debited in: a rebuild replays the return on any other generation exactly once.
 */
export const QuotaDebitsReturned = z.object(DebitFields);

/** One chat of the knowledge tools, taken from the subject's monthly chat quota before it runs. */
export const ChatQuotaConsumed = z.object({
  subject: z.string(),
  subjectKind: z.enum(['key', 'anonymous']),
  plan: Plan,
  month: z.string().regex(/^\d{4}-\d{2}$/),
  model: z.string(),
  requestId: z.string(),
  /** The quota generation the chat was counted in, as on QuotaDebited. */
  generation: z.string().optional(),
});
/** The unit of a chat that failed (provider or internal error), given back. */
export const ChatQuotaRefunded = z.object({
  subject: z.string(),
  month: z.string().regex(/^\d{4}-\d{2}$/),
  requestId: z.string(),
  reason: z.string(),
  /** The quota generation it was given back on; absent when none was live. */
  generation: z.string().optional(),
});

export const ApiKeyIssued = z.object({
  keyId: z.string(),
  /** sha256 of the key; the key itself is never stored. */
  keyHash: z.string().regex(/^[0-9a-f]{64}$/),
  prefix: z.string(),
  plan: Plan,
  owner: z.string(),
  via: z.enum(['operator', 'siwe']),
});
export const ApiKeyPlanChanged = z.object({ keyId: z.string(), from: Plan, to: Plan });
export const ApiKeyRevoked = z.object({ keyId: z.string(), reason: z.string() });

/**
 * What a subscription can receive. `subscription_disabled` tells the owner (on another of the
 * key's subscriptions) that one of its subscriptions was disabled.
 */
export const WebhookEventType = z.enum([
  'trade_call',
  'regime_shift',
  'scan_digest',
  'subscription_disabled',
  'risk_shift',
]);
export type WebhookEventType = z.infer<typeof WebhookEventType>;

/** AES-256-GCM ciphertext of a subscription secret; the master key never enters the log. */
export const EncryptedSecret = z.object({
  keyVersion: z.string(),
  iv: z.string(),
  tag: z.string(),
  ciphertext: z.string(),
});

export const SubscriptionCreated = z.object({
  subscriptionId: z.string(),
  keyId: z.string(),
  url: z.url(),
  events: z.array(WebhookEventType).min(1),
  timeframes: z.array(Timeframe).optional(),
  assets: z.array(z.string()).optional(),
  minConfidence: z.number().int().min(0).max(100).optional(),
  timeframe: Timeframe.optional(),
  exchange: Exchange.optional(),
  topN: z.number().int().min(1).max(100).optional(),
  cadence: z.enum(['1h', '4h', '1d']).optional(),
  /** Pinned payload version; absent on subscriptions created before versions existed (1). */
  eventVersion: z.number().int().positive().optional(),
  secret: EncryptedSecret,
});
export const SubscriptionDeleted = z.object({ subscriptionId: z.string(), keyId: z.string() });
export const SubscriptionDisabled = z.object({
  subscriptionId: z.string(),
  reason: z.string(),
  consecutiveFailures: z.number().int().nonnegative(),
});
/**
 * A new secret for a subscription. Until `previousValidUntil` deliveries are signed with both the
 * new and the previous secret, so a receiver can switch at its own pace.
 */
export const SubscriptionSecretRotated = z.object({
  subscriptionId: z.string(),
  secret: EncryptedSecret,
  previousValidUntil: IsoTime,
});
/**
 * The same secrets sealed again under the master key that seals now (`npm run keys -- reseal-webhook-secrets`),
 * so the keys before it can be removed: nothing changes for the subscriber. `previousSecret` is the
 * rotation's previous secret, re-sealed, while its overlap lasts.
 */
export const SubscriptionSecretResealed = z.object({
  subscriptionId: z.string(),
  secret: EncryptedSecret,
  previousSecret: EncryptedSecret.optional(),
});
/**
 * The subscriber changed what a subscription takes or where it sends (PATCH /api/webhooks/:id):
 * the whole set as it now stands, every field the create carries but the secret and the payload
 * version; a filter absent here is removed. The id, secret, `seq` numbering and deliveries stay.
 */
export const SubscriptionUpdated = SubscriptionCreated.omit({
  secret: true,
  keyId: true,
  eventVersion: true,
});
export const SubscriptionReEnabled = z.object({
  subscriptionId: z.string(),
  /** "Recover everything failed since T": failed deliveries after this time are re-sent. */
  recoverSince: IsoTime.optional(),
});

const DeliveryRef = {
  deliveryId: z.string(),
  subscriptionId: z.string(),
  attempt: z.number().int().positive(),
  /**
   * The delivery's `seq`, on the events of a delivery whose first attempt is recorded in its
   * `DeliverySequenced` (`first`): where a reader of the delivery's own stream finds that record.
   */
  seq: z.number().int().positive().optional(),
};
export const DeliveryAttempted = z.object({
  ...DeliveryRef,
  eventId: z.string(),
  webhookEvent: WebhookEventType,
  url: z.string(),
  /** What started the attempt: a new event, a due retry, a stale attempt, a digest, a user. */
  trigger: z.enum(['event', 'retry', 'stale', 'digest', 'recover', 'resend']).optional(),
  /**
   * The exact JSON body, on the first attempt only: every retry and resend sends these bytes, so
   * `delivery_id` and content never change. It holds no secret (the signature is per attempt).
   */
  body: z.string().optional(),
});
/**
 * An attempt put in its endpoint's queue behind a busy receiver: it reserves the attempt (and, on
 * the first, carries the body: in logs written before 2026-11-27; since then a first attempt's
 * queue record is `DeliverySequenced.first`) for the dispatcher that queued it until the stuck time.
 * When its turn comes well inside that time, that dispatcher sends it and its outcome follows this
 * event with no claim between (a flushed append saved per delivery in a flood); otherwise the
 * `DeliveryAttempted` of the same attempt is appended at its turn, just before the send, so only
 * the one claim made at the turn sends it, and a long wait never passes for an attempt stuck in flight.
 */
export const DeliveryQueued = DeliveryAttempted;
/** When the request of an attempt was actually sent, and how long it waited in its endpoint's queue. */
const SendTiming = {
  sentAt: IsoTime.optional(),
  queuedMs: z.number().nonnegative().optional(),
};
/**
 * A delivery's place in its subscription's sequence, in the stream `webhook-seq-<subscriptionId>`:
 * the event's revision + 1 is the delivery's `seq`. Appended once per delivery (its id is derived
 * from the delivery id), carrying the first attempt's claim or queue record (`first`), so the
 * numbers have no gaps.
 */
export const DeliverySequenced = z.object({
  subscriptionId: z.string(),
  deliveryId: z.string(),
  /**
   * The first attempt's queue record or claim, recorded in this event rather than as a
   * `DeliveryQueued` or `DeliveryAttempted` of its own (two appends per delivery instead of three):
   * the delivery's own stream `delivery-<id>` then begins with what follows it (its outcome, or its
   * claim at its turn), appended as to a stream that does not exist yet. `claimId` tells the
   * dispatcher that recorded it from one that re-appended the same event (a redelivered bus
   * message, a handling stalled beside its redelivery: the append is idempotent, so every handling
   * sends only if the claim recorded is its own: its append says it wrote it (`written`), or, on a
   * store that does not say, the record read back names its claim). Absent in logs written before
   * 2026-11-27, where the first attempt's event is the delivery stream's first.
   */
  first: DeliveryAttempted.extend({ queued: z.boolean().optional(), claimId: z.string() }).optional(),
});
export const DeliverySucceeded = z.object({
  ...DeliveryRef,
  ...SendTiming,
  status: z.number().int(),
  latencyMs: z.number().nonnegative(),
  response: z.string().max(1024),
});
export const DeliveryFailed = z.object({
  ...DeliveryRef,
  ...SendTiming,
  status: z.number().int().nullable(),
  error: z.string().nullable(),
  latencyMs: z.number().nonnegative(),
  response: z.string().max(1024).nullable(),
  /** When the next attempt is due; null when no attempt follows. */
  nextAttemptAt: IsoTime.nullable(),
  /**
   * Not sent: the endpoint's circuit breaker was open. A held attempt does not use up the retry
   * schedule; it is tried again when the breaker next lets a probe through.
   */
  held: z.boolean().optional(),
});

/**
 * The replay clock of a deployment: feed time = start + (wall time − anchor) × speed. Recorded
 * once by the first process to open the replay; every process and every restart reads it, so
 * all share one clock and none rewinds.
 */
export const ReplayClockAnchored = z.object({
  anchor: z.number().int(),
  start: z.number().int(),
  speed: z.number().nonnegative(),
  dir: z.string(),
});

/**
 * The Merkle root of every verdict stream's heads (its last verdict and last chained outcome) at
 * log `position`, published on a public chain in a transaction from `address` to itself
 * (services/history/anchor.ts says the data's layout); recorded once the transaction is mined.
 */
export const HistoryAnchored = z.object({
  root: z.string().regex(/^[0-9a-f]{64}$/),
  position: z.number().int().nonnegative(),
  streams: z.number().int().positive(),
  chainId: z.number().int().positive(),
  address: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
  txHash: z.string().regex(/^0x[0-9a-f]{64}$/),
  blockNumber: z.number().int().nonnegative(),
  anchoredAt: IsoTime,
});

export const EVENT_CATALOG = {
  VerdictRecorded,
  RegimeShifted,
  RiskShifted,
  VerdictOutcomeResolved,
  PaymentAuthorized,
  PaymentSettlementPending,
  PaymentSettled,
  PaymentSettlementFailed,
  PaymentReleased,
  PaymentAnswerServed,
  PaymentIdentifierClaimed,
  QuotaDebited,
  QuotaDebitsRecorded,
  QuotaDebitsReturned,
  ChatQuotaConsumed,
  ChatQuotaRefunded,
  ApiKeyIssued,
  ApiKeyPlanChanged,
  ApiKeyRevoked,
  SubscriptionCreated,
  SubscriptionDeleted,
  SubscriptionDisabled,
  SubscriptionReEnabled,
  SubscriptionSecretRotated,
  SubscriptionSecretResealed,
  SubscriptionUpdated,
  DeliveryAttempted,
  DeliveryQueued,
  DeliverySequenced,
  DeliverySucceeded,
  DeliveryFailed,
  ReplayClockAnchored,
  HistoryAnchored,
} as const;

export type EventType = keyof typeof EVENT_CATALOG;
export const EVENT_TYPES = Object.keys(EVENT_CATALOG) as EventType[];
export type EventData<T extends EventType> = z.infer<(typeof EVENT_CATALOG)[T]>;

/** A recorded domain event, discriminated on `type`. */
export type DomainEvent = { [T in EventType]: RecordedEvent<EventData<T>, T> }[EventType];
export type NewDomainEvent<T extends EventType = EventType> = NewEvent<EventData<T>, T>;

export function isEventType(type: string): type is EventType {
  return Object.hasOwn(EVENT_CATALOG, type);
}

/**
 * Builds a validated domain event ready to append. Validation happens here, at the edge, so a
 * malformed payload is refused before anything is written.
 */
export function newEvent<T extends EventType>(
  type: T,
  data: EventData<T>,
  meta: { id?: string; correlationId?: string; causationId?: string | null } = {},
): NewDomainEvent<T> {
  const parsed = EVENT_CATALOG[type].parse(data) as EventData<T>;
  return { type, data: parsed, ...meta };
}

/** Per catalog type, the copy-free check of its payload (contracts/zod-check.ts), when it compiles. */
const CHECKS = new Map(EVENT_TYPES.map((type) => [type, compileCheck(EVENT_CATALOG[type])]));

/**
 * Narrows a stored event to a domain event, validating its payload against the catalog. It
 * accepts exactly what the catalog's zod schemas accept and answers the same value; a payload
 * zod would return unchanged (every payload this service writes: `newEvent` stores zod's own
 * output) is checked without being copied, and the event itself is returned.
 */
export function parseDomainEvent(event: RecordedEvent): DomainEvent | null {
  const type = event.type as EventType;
  // Every catalog type has an entry (null when its schema is not compiled): none, not a domain event.
  const check = CHECKS.get(type);
  if (check === undefined) return null;
  const verdict = check ? check(event.data) : undefined;
  if (verdict === CLEAN) return event as DomainEvent;
  if (verdict === INVALID) return null;
  const result = EVENT_CATALOG[type].safeParse(event.data);
  if (!result.success) return null;
  return { ...event, data: result.data } as DomainEvent;
}
