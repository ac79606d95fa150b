import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { ExpectedRevision } from '../../contracts/envelope.ts';
import { type EventData, type EventType, newEvent } from '../../contracts/events.ts';
import {
  decideReservation,
  foldPayment,
  type PaymentIdentity,
  type PaymentState,
  paymentStream,
} from './payment-state.ts';

export interface PaymentRef {
  nonce: `0x${string}`;
  network: string;
  asset: `0x${string}`;
}

/** A reserved payment: the appends that follow are guarded by the stream's revision. */
export interface PaymentHandle {
  ref: PaymentRef;
  payer: string;
  stream: string;
  revision: number;
  correlationId: string;
}

export type ReserveResult =
  | { ok: true; handle: PaymentHandle }
  | { ok: false; reason: string; message: string };

/**
 * The payment log. Reserving appends PaymentAuthorized to `payment-<nonce>` with an expected
 * revision ("no stream", or the revision of its release): the store's optimistic concurrency,
 * not a lock, lets exactly one request on any replica use an authorisation.
 */
export class PaymentLedger {
  constructor(private readonly store: EventStore) {}

  async state(id: PaymentIdentity): Promise<PaymentState | null> {
    return foldPayment(await this.store.readStream(paymentStream(id)));
  }

  /**
   * `expectedRevision`, from a reservation decision the caller already made on this stream, spares
   * reading it again; the append still refuses when the stream moved since.
   */
  async reserve(
    data: EventData<'PaymentAuthorized'>,
    expectedRevision?: ExpectedRevision,
  ): Promise<ReserveResult> {
    const id = { network: data.network, asset: data.asset, payer: data.payer, nonce: data.nonce };
    const stream = paymentStream(id);
    let expected = expectedRevision;
    if (expected === undefined) {
      const decision = decideReservation(await this.state(id));
      if (!decision.ok) return decision;
      expected = decision.expectedRevision;
    }
    try {
      const result = await this.store.append(
        stream,
        [newEvent('PaymentAuthorized', data, { correlationId: data.requestId })],
        { expectedRevision: expected },
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
          revision: result.nextRevision,
          correlationId: data.requestId,
        },
      };
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) {
        return {
          ok: false,
          reason: 'payment_in_use',
          message: 'this payment authorisation is already being used by another request',
        };
      }
      throw err;
    }
  }

  /** Appends the next step of a reserved payment; throws WrongExpectedRevisionError if another writer moved it. */
  async record<T extends Exclude<EventType, 'PaymentAuthorized'>>(
    handle: PaymentHandle,
    type: T,
    data: Omit<EventData<T>, 'nonce' | 'network' | 'asset'>,
  ): Promise<void> {
    const event = newEvent(type, { ...handle.ref, ...data } as EventData<T>, {
      correlationId: handle.correlationId,
    });
    const result = await this.store.append(handle.stream, [event], { expectedRevision: handle.revision });
    handle.revision = result.nextRevision;
  }

  /**
   * Records the settlement with tx T. Another writer (the reconciler of any replica) may have
   * recorded the same fact first: both say "settled with T", so that is convergence, not a
   * conflict. Returns the state the payment ended in.
   */
  async recordSettled(
    handle: PaymentHandle,
    data: Omit<EventData<'PaymentSettled'>, 'nonce' | 'network' | 'asset'>,
  ): Promise<'recorded' | 'already_settled'> {
    return this.converge(handle, () => this.record(handle, 'PaymentSettled', data), ['settled']);
  }

  /**
   * Appends a step unless another writer already moved the payment to one of `finalStates`
   * (a later fact than this step); any other move is still a conflict.
   */
  async converge(
    handle: PaymentHandle,
    append: () => Promise<void>,
    finalStates: PaymentState['status'][],
  ): Promise<'recorded' | 'already_settled'> {
    try {
      await append();
      return 'recorded';
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError)) throw err;
      const now = foldPayment(await this.store.readStream(handle.stream));
      if (now && finalStates.includes(now.status)) {
        handle.revision = now.revision;
        return 'already_settled';
      }
      throw err;
    }
  }
}
