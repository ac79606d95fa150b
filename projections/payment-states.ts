import { defineProjection } from './projection.ts';

/** Where a payment authorisation stands, as its last event says. */
export type PaymentPhase = 'authorized' | 'pending' | 'released' | 'settled' | 'failed' | 'lost';

export interface PaymentStates {
  /** Payments in flight, by stream: they can still move, so each one is remembered. */
  open: Record<string, 'authorized' | 'pending'>;
  /**
   * Released, settled and failed payments are only counted, so the state stays as small as the
   * number in flight (a released authorisation presented again is counted out of `released`).
   */
  released: number;
  settled: number;
  failed: number;
  /** Served answers whose settlement never landed before the authorisation expired: the seller's loss. */
  lost: number;
}

/**
 * Payments by state, for the operator (the `payments` gauge): how many are settled or failed,
 * how many answers were served and never paid (`lost`), and how many wait on a settlement, folded from the Payment* events every payment stream records.
 */
export const paymentStatesProjection = defineProjection({
  name: 'payment-states',
  version: 3,
  eventTypes: [
    'PaymentAuthorized',
    'PaymentSettlementPending',
    'PaymentSettled',
    'PaymentSettlementFailed',
    'PaymentReleased',
  ],
  initial: (): PaymentStates => ({ open: {}, released: 0, settled: 0, failed: 0, lost: 0 }),
  evolve(state, event) {
    switch (event.type) {
      case 'PaymentAuthorized':
        // Only a released authorisation is reserved again in its own stream.
        if (event.revision > 0) state.released = Math.max(0, state.released - 1);
        state.open[event.stream] = 'authorized';
        break;
      case 'PaymentSettlementPending':
        state.open[event.stream] = 'pending';
        break;
      case 'PaymentReleased':
        delete state.open[event.stream];
        state.released += 1;
        break;
      case 'PaymentSettled':
        delete state.open[event.stream];
        state.settled += 1;
        break;
      case 'PaymentSettlementFailed':
        delete state.open[event.stream];
        if (event.data.sellerLoss) state.lost += 1;
        else state.failed += 1;
        break;
    }
    return state;
  },
});

/** The count in each state, every state present (0 when none), in a fixed order. */
export function paymentCounts(state: PaymentStates): Record<PaymentPhase, number> {
  const counts: Record<PaymentPhase, number> = {
    authorized: 0,
    pending: 0,
    released: state.released,
    settled: state.settled,
    failed: state.failed,
    lost: state.lost,
  };
  for (const phase of Object.values(state.open)) counts[phase] += 1;
  return counts;
}
