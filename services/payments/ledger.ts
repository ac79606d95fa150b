import { createHash } from 'node:crypto';
import { type Aggregate, handleCommand } from '../../adapters/event-store/command.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { type EventData, newEvent, parseDomainEvent } from '../../contracts/events.ts';
import {
  aggregatePayment,
  PAYMENT_IN_USE_MESSAGE,
  type PaymentCommand,
  type PaymentIdentity,
  PaymentRuleError,
  type PaymentState,
  paymentDecider,
  paymentStream,
} from './payment-state.ts';

export interface PaymentRef {
  nonce: `0x${string}`;
  network: string;
  asset: `0x${string}`;
}

/**
 * A reserved payment, with the state and revision its holder last wrote: the steps that follow
 * are decided against it and appended at that revision, so another writer's move is noticed.
 */
export interface PaymentHandle {
  ref: PaymentRef;
  payer: string;
  stream: string;
  known: Aggregate<PaymentState | null>;
}

export type ReserveResult =
  | { ok: true; handle: PaymentHandle }
  | { ok: false; reason: string; message: string };

/** The payment a payer's payment id is bound to, as its stream last says, with the stream's revision. */
export interface PaymentIdClaim {
  stream: string;
  claim: EventData<'PaymentIdentifierClaimed'> | null;
  revision: number | null;
}

/**
 * `x402-payment-id-<sha256 of payer and id, 40 hex>`: one stream per payer and payment-identifier
 * id, whatever the authorisation (each retry under the id signs a new nonce).
 */
export function paymentIdStream(payer: string, paymentId: string): string {
  const hash = createHash('sha256').update(`${payer.toLowerCase()}|${paymentId}`).digest('hex');
  return `x402-payment-id-${hash.slice(0, 40)}`;
}

/** A step after the reservation. */
export type PaymentStep = Exclude<PaymentCommand, { kind: 'reserve' }>;

/**
 * The payment log. Every write is a command decided by `paymentDecider` and appended at the
 * revision it was decided on: the store's optimistic concurrency, not a lock, lets exactly one
 * request on any replica use an authorisation.
 */
export class PaymentLedger {
  constructor(private readonly store: EventStore) {}

  async state(id: PaymentIdentity): Promise<PaymentState | null> {
    return (await this.read(id)).state;
  }

  /** The payment's state with its revision, to decide on and pass back to `reserve`. */
  read(id: PaymentIdentity): Promise<Aggregate<PaymentState | null>> {
    return aggregatePayment(this.store, paymentStream(id));
  }

  /** Which payment the payer's payment id is bound to, if any. */
  async readClaim(payer: string, paymentId: string): Promise<PaymentIdClaim> {
    const stream = paymentIdStream(payer, paymentId);
    let claim: EventData<'PaymentIdentifierClaimed'> | null = null;
    let revision: number | null = null;
    for (const raw of await this.store.readStream(stream)) {
      revision = raw.revision;
      const event = parseDomainEvent(raw);
      if (event?.type === 'PaymentIdentifierClaimed') claim = event.data;
    }
    return { stream, claim, revision };
  }

  /**
   * Binds the payment id to a reserved payment, at the revision `read` saw: false when another
   * payment took the id meanwhile (on any replica).
   */
  async claim(read: PaymentIdClaim, data: EventData<'PaymentIdentifierClaimed'>): Promise<boolean> {
    try {
      await this.store.append(read.stream, [newEvent('PaymentIdentifierClaimed', data)], {
        expectedRevision: read.revision ?? 'no_stream',
      });
      return true;
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) return false;
      throw err;
    }
  }

  /**
   * `known`, the stream as the caller already read it, spares reading it again; the append still
   * refuses when the stream moved since.
   */
  async reserve(
    data: EventData<'PaymentAuthorized'>,
    known?: Aggregate<PaymentState | null>,
  ): Promise<ReserveResult> {
    const id = { network: data.network, asset: data.asset, payer: data.payer, nonce: data.nonce };
    const stream = paymentStream(id);
    try {
      const handled = await handleCommand(
        this.store,
        stream,
        paymentDecider,
        { kind: 'reserve', data },
        known ? { known } : {},
      );
      return {
        ok: true,
        handle: {
          payer: data.payer,
          ref: {
            nonce: data.nonce as `0x${string}`,
            network: data.network,
            asset: data.asset as `0x${string}`,
          },
          stream,
          known: { state: handled.state, revision: handled.revision },
        },
      };
    } catch (err) {
      if (err instanceof PaymentRuleError) return { ok: false, reason: err.reason, message: err.message };
      if (err instanceof WrongExpectedRevisionError) {
        return {
          ok: false,
          reason: 'payment_in_use',
          message: PAYMENT_IN_USE_MESSAGE,
        };
      }
      throw err;
    }
  }

  /**
   * Records the next step of a reserved payment, decided on the state the handle holds. Throws
   * WrongExpectedRevisionError if another writer moved it, unless `converge`: then the step is
   * decided again on the stream as it is now, where a later outcome another writer (the
   * reconciler of any replica) recorded first, or the same settlement, decides nothing; that is
   * convergence, not a conflict. Returns whether this call appended.
   */
  async transition(
    handle: PaymentHandle,
    step: PaymentStep,
    options: { converge?: boolean } = {},
  ): Promise<'recorded' | 'already_settled'> {
    const handled = await handleCommand(this.store, handle.stream, paymentDecider, step, {
      known: handle.known,
      retry: options.converge ? 1 : 0,
    });
    handle.known = { state: handled.state, revision: handled.revision };
    return handled.events.length > 0 ? 'recorded' : 'already_settled';
  }
}
