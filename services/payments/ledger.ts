import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { ExpectedRevision } from '../../contracts/envelope.ts';
import { type EventData, type EventType, newEvent } from '../../contracts/events.ts';
import { decideReservation, foldPayment, type PaymentState, paymentStream } from './payment-state.ts';

export interface PaymentRef {
  nonce: `0x${string}`;
  network: string;
  asset: `0x${string}`;
}

/** A reserved payment: the appends that follow are guarded by the stream's revision. */
export interface PaymentHandle {
  ref: PaymentRef;
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

  async state(nonce: string): Promise<PaymentState | null> {
    return foldPayment(await this.store.readStream(paymentStream(nonce)));
  }

  /**
   * `expectedRevision`, from a reservation decision the caller already made on this stream, spares
   * reading it again; the append still refuses when the stream moved since.
   */
  async reserve(
    data: EventData<'PaymentAuthorized'>,
    expectedRevision?: ExpectedRevision,
  ): Promise<ReserveResult> {
    const stream = paymentStream(data.nonce);
    let expected = expectedRevision;
    if (expected === undefined) {
      const decision = decideReservation(await this.state(data.nonce));
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
}
