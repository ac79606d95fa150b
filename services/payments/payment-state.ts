import { createHash } from 'node:crypto';
import {
  type Aggregate,
  aggregateStream,
  asFolded,
  type DecidedEvent,
  type Decider,
  type EventMeta,
} from '../../adapters/event-store/command.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ExpectedRevision, RecordedEvent } from '../../contracts/envelope.ts';
import { ERRORS } from '../../contracts/errors.ts';
import type { EventData } from '../../contracts/events.ts';

/**
 * The life of one payment authorisation, folded from its stream `payment-<nonce>`:
 *
 *   authorized ──▶ pending ──▶ settled | failed
 *        └──────▶ released ──▶ authorized (the same authorisation may be presented again)
 */
export type PaymentStatus = 'authorized' | 'pending' | 'settled' | 'failed' | 'released';

export interface PaymentState {
  status: PaymentStatus;
  /** Revision of the stream's last event: the expected revision of the next append. */
  revision: number;
  authorized: EventData<'PaymentAuthorized'> | null;
  txHash: `0x${string}` | null;
  /** When the last event was recorded (ISO). */
  lastAt: string;
  /** The paid answer the log keeps for this payment (kept at hand-off), or null. */
  answer: Record<string, unknown> | null;
  /**
   * Whether the answer was handed to a caller (PaymentAnswerServed). A hand-off recorded before
   * answers were kept counts as served: whether it was is not known, and it was booked so before.
   */
  served: boolean;
}

/**
 * What identifies one authorisation, as ERC-3009 defines it: a nonce is unique only per
 * (token contract, authorizer), and the same contract address may exist on two networks.
 */
export interface PaymentIdentity {
  network: string;
  asset: string;
  payer: string;
  nonce: string;
}

/** The identity as one lower-case string; equal identities give equal keys. */
export function identityKey(id: PaymentIdentity): string {
  return [id.network, id.asset, id.payer, id.nonce].map((part) => part.toLowerCase()).join('|');
}

/**
 * `payment-<sha256 of the identity, 40 hex>`: fixed length whatever the network name, and two
 * payers (or rails) reusing a nonce get two streams.
 */
export function paymentStream(id: PaymentIdentity): string {
  return `payment-${createHash('sha256').update(identityKey(id)).digest('hex').slice(0, 40)}`;
}

export type PaymentEvent = DecidedEvent<
  | 'PaymentAuthorized'
  | 'PaymentSettlementPending'
  | 'PaymentSettled'
  | 'PaymentSettlementFailed'
  | 'PaymentReleased'
  | 'PaymentAnswerServed'
>;

function evolvePayment(
  state: PaymentState | null,
  event: PaymentEvent,
  meta?: EventMeta,
): PaymentState | null {
  // A decided event not yet recorded (a decider spec) takes the next revision and keeps the time.
  const base = {
    revision: meta?.revision ?? (state ? state.revision + 1 : 0),
    lastAt: meta?.recordedAt ?? state?.lastAt ?? '',
  };
  switch (event.type) {
    case 'PaymentAuthorized':
      return {
        ...base,
        status: 'authorized',
        authorized: event.data,
        txHash: null,
        answer: null,
        served: false,
      };
    case 'PaymentSettlementPending':
      return state
        ? {
            ...state,
            ...base,
            status: 'pending',
            txHash: (event.data.txHash as `0x${string}`) ?? state.txHash,
            answer: event.data.answer ?? state.answer,
            // The hand-off (authorized → pending): one without a kept answer predates the served record.
            served: state.served || (state.status === 'authorized' && event.data.answer === undefined),
          }
        : null;
    case 'PaymentAnswerServed':
      return state
        ? {
            ...state,
            ...base,
            served: true,
            answer: event.data.answer ?? state.answer,
            txHash: state.txHash ?? (event.data.txHash as `0x${string}` | undefined) ?? null,
          }
        : null;
    case 'PaymentSettled':
      return state
        ? { ...state, ...base, status: 'settled', txHash: event.data.txHash as `0x${string}` }
        : null;
    case 'PaymentSettlementFailed':
      return state ? { ...state, ...base, status: 'failed' } : null;
    case 'PaymentReleased':
      return state ? { ...state, ...base, status: 'released' } : null;
  }
}

export const PAYMENT_EVENT_TYPES: readonly PaymentEvent['type'][] = [
  'PaymentAuthorized',
  'PaymentSettlementPending',
  'PaymentSettled',
  'PaymentSettlementFailed',
  'PaymentReleased',
  'PaymentAnswerServed',
];

/** Folds one recorded event of any type: those that are not payment events leave the state as is. */
export function evolveRecorded(state: PaymentState | null, raw: RecordedEvent): PaymentState | null {
  const event = asFolded<PaymentEvent>({ eventTypes: PAYMENT_EVENT_TYPES }, raw);
  return event ? evolvePayment(state, event, raw) : state;
}

export function foldPayment(events: RecordedEvent[]): PaymentState | null {
  return events.reduce<PaymentState | null>(evolveRecorded, null);
}

export type ReservationDecision =
  | { ok: true; expectedRevision: ExpectedRevision }
  | { ok: false; reason: string; message: string };

/**
 * Why an authorisation in use is refused (409 payment_in_use, retryable): another request holds
 * it, and its answer comes back to a retry; a holder that died (its process killed) keeps it
 * until the authorisation expires, when the reconciler releases it and only a new one can pay.
 */
export const PAYMENT_IN_USE_MESSAGE = ERRORS.payment_in_use.message;

/** Whether an authorisation may be reserved for a new request, given its stream so far. */
export function decideReservation(state: PaymentState | null): ReservationDecision {
  if (state === null) return { ok: true, expectedRevision: 'no_stream' };
  switch (state.status) {
    case 'released':
      return { ok: true, expectedRevision: state.revision };
    case 'authorized':
    case 'pending':
      return {
        ok: false,
        reason: 'payment_in_use',
        message: PAYMENT_IN_USE_MESSAGE,
      };
    case 'settled':
      return {
        ok: false,
        reason: 'payment_already_used',
        message: `this payment authorisation was already used${state.txHash ? ` (settled in ${state.txHash})` : ''}; sign a new one`,
      };
    case 'failed':
      return {
        ok: false,
        reason: 'payment_already_failed',
        message: 'this payment authorisation already failed to settle; sign a new one',
      };
  }
}

/** Unfinished payments: reconciliation looks at these once they are old enough. */
export function isOpen(state: PaymentState): boolean {
  return state.status === 'authorized' || state.status === 'pending';
}

/** Event data past the reference the payment's own authorisation already carries. */
type After<T extends PaymentEvent['type']> = Omit<EventData<T>, 'nonce' | 'network' | 'asset'>;

/**
 * What may happen to one payment. `reserve` opens it (or reopens a released one); the others
 * are the steps a request or the reconciler records once it is reserved.
 */
export type PaymentCommand =
  | { kind: 'reserve'; data: EventData<'PaymentAuthorized'> }
  | ({ kind: 'release' } & After<'PaymentReleased'>)
  | ({ kind: 'markPending' } & After<'PaymentSettlementPending'>)
  | ({ kind: 'settle' } & After<'PaymentSettled'>)
  | ({ kind: 'fail' } & After<'PaymentSettlementFailed'>)
  | ({ kind: 'serve' } & After<'PaymentAnswerServed'>);

export class PaymentRuleError extends Error {
  override readonly name = 'PaymentRuleError';
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

function refuse(command: PaymentCommand, state: PaymentState | null): never {
  throw new PaymentRuleError(
    'payment_transition_refused',
    `a payment ${state ? state.status : 'never reserved'} cannot ${command.kind}`,
  );
}

/**
 * The hash the reconciler records when the chain shows the authorisation used but it cannot find
 * the transaction: "settled, transaction unknown". It agrees with any hash.
 */
export const UNKNOWN_TX_HASH = '0x';

/** Whether two records of "settled" tell of the same settlement: equal hashes, or one unknown. */
function sameSettlement(recorded: string | null, next: string): boolean {
  if (recorded === null || recorded === UNKNOWN_TX_HASH || next === UNKNOWN_TX_HASH) return true;
  return recorded.toLowerCase() === next.toLowerCase();
}

/**
 * The rules of one payment's life. A step that another writer already carried past (the request
 * and the reconciler race to the same outcome) decides nothing, so recording it again converges
 * instead of conflicting; a step that contradicts what is recorded (settle a released payment,
 * settle in another transaction) is refused.
 */
function decidePayment(command: PaymentCommand, state: PaymentState | null): PaymentEvent[] {
  if (command.kind === 'reserve') {
    const decision = decideReservation(state);
    if (!decision.ok) throw new PaymentRuleError(decision.reason, decision.message);
    return [{ type: 'PaymentAuthorized', data: command.data, correlationId: command.data.requestId }];
  }
  const auth = state?.authorized;
  if (!state || !auth) refuse(command, state);
  const ref = { nonce: auth.nonce, network: auth.network, asset: auth.asset };
  const { kind: _kind, ...data } = command;
  const correlationId = auth.requestId;
  switch (command.kind) {
    case 'release':
      // A pending payment only while its answer reached no one (the reconciler, once it expired unused).
      if (state.status !== 'authorized' && !(state.status === 'pending' && !state.served)) {
        refuse(command, state);
      }
      return [
        { type: 'PaymentReleased', data: { ...ref, ...(data as After<'PaymentReleased'>) }, correlationId },
      ];
    case 'markPending':
      if (state.status === 'settled' || state.status === 'failed') return [];
      if (state.status !== 'authorized' && state.status !== 'pending') refuse(command, state);
      return [
        {
          type: 'PaymentSettlementPending',
          data: { ...ref, ...(data as After<'PaymentSettlementPending'>) },
          correlationId,
        },
      ];
    case 'settle':
      if (state.status === 'settled' && sameSettlement(state.txHash, command.txHash)) return [];
      if (state.status === 'settled') {
        throw new PaymentRuleError(
          'payment_settled_differently',
          `this payment was already settled in ${state.txHash}, not ${command.txHash}`,
        );
      }
      if (state.status !== 'authorized' && state.status !== 'pending') refuse(command, state);
      return [
        { type: 'PaymentSettled', data: { ...ref, ...(data as After<'PaymentSettled'>) }, correlationId },
      ];
    case 'serve': {
      // Only a payment that charges (or may still charge) is served: one released or failed meanwhile
      // (the reconciler, a replay racing it) paid for nothing, so its answer must not go out, and
      // a replay that decided on the pending state it read is refused, not converged into a no-op.
      if (state.status !== 'pending' && state.status !== 'settled') refuse(command, state);
      // Recorded once per payment while it may still be charged (settled, nothing is at stake),
      // or to keep an answer the log did not hold yet.
      const first = state.status === 'pending' && !state.served;
      const keeps = command.answer !== undefined && state.answer === null;
      if (!first && !keeps) return [];
      return [
        {
          type: 'PaymentAnswerServed',
          data: { ...ref, ...(data as After<'PaymentAnswerServed'>) },
          correlationId,
        },
      ];
    }
    case 'fail':
      if (state.status === 'settled' || state.status === 'failed') return [];
      if (state.status !== 'pending') refuse(command, state);
      // Once its kept answer was handed over (the same payment presented again may be served while
      // its settlement fails) a payment fails only as the seller's loss; a plain failure (the
      // request's refusal) is refused and the payment stays pending, for reconciliation to settle
      // it from the chain or book the loss. (A hand-off that kept no answer, made before answers
      // were kept, counts as served without anyone having been given anything here.)
      if (state.served && state.answer !== null && command.sellerLoss !== true) {
        throw new PaymentRuleError(
          'payment_already_served',
          "this payment's answer was served; it fails only as the seller's loss",
        );
      }
      return [
        {
          type: 'PaymentSettlementFailed',
          data: { ...ref, ...(data as After<'PaymentSettlementFailed'>) },
          correlationId,
        },
      ];
  }
}

export const paymentDecider: Decider<PaymentState | null, PaymentCommand, PaymentEvent> = {
  eventTypes: PAYMENT_EVENT_TYPES,
  initialState: () => null,
  evolve: evolvePayment,
  decide: decidePayment,
};

export function aggregatePayment(store: EventStore, stream: string): Promise<Aggregate<PaymentState | null>> {
  return aggregateStream(store, stream, paymentDecider);
}
