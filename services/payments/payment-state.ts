import { createHash } from 'node:crypto';
import type { ExpectedRevision, RecordedEvent } from '../../contracts/envelope.ts';
import { type EventData, parseDomainEvent } from '../../contracts/events.ts';

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

export function evolvePayment(state: PaymentState | null, raw: RecordedEvent): PaymentState | null {
  const event = parseDomainEvent(raw);
  if (!event) return state;
  const base = { revision: raw.revision, lastAt: raw.recordedAt };
  switch (event.type) {
    case 'PaymentAuthorized':
      return { ...base, status: 'authorized', authorized: event.data, txHash: null };
    case 'PaymentSettlementPending':
      return state
        ? {
            ...state,
            ...base,
            status: 'pending',
            txHash: (event.data.txHash as `0x${string}`) ?? state.txHash,
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
    default:
      return state;
  }
}

export function foldPayment(events: RecordedEvent[]): PaymentState | null {
  return events.reduce<PaymentState | null>(evolvePayment, null);
}

export type ReservationDecision =
  | { ok: true; expectedRevision: ExpectedRevision }
  | { ok: false; reason: string; message: string };

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
        message: 'this payment authorisation is already being used by another request',
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
