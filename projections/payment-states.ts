import { defineProjection } from './projection.ts';

/** Where a payment authorisation stands, as its last event says. */
export type PaymentPhase = 'authorized' | 'pending' | 'released' | 'settled' | 'failed';

export interface PaymentStates {
  /** Payments not finished yet, by stream: they can still move, so each one is remembered. */
  open: Record<string, 'authorized' | 'pending' | 'released'>;
  /** Finished payments are only counted: the state stays as small as the number in flight. */
  settled: number;
  failed: number;
}

/**
 * Payments by state, for the operator (the `payments` gauge): how many are settled or failed,
 * and how many wait on a settlement, folded from the Payment* events every payment stream records.
 */
export const paymentStatesProjection = defineProjection({
  name: 'payment-states',
  version: 1,
  eventTypes: [
    'PaymentAuthorized',
    'PaymentSettlementPending',
    'PaymentSettled',
    'PaymentSettlementFailed',
    'PaymentReleased',
  ],
  initial: (): PaymentStates => ({ open: {}, settled: 0, failed: 0 }),
  evolve(state, event) {
    switch (event.type) {
      case 'PaymentAuthorized':
        state.open[event.stream] = 'authorized';
        break;
      case 'PaymentSettlementPending':
        state.open[event.stream] = 'pending';
        break;
      case 'PaymentReleased':
        state.open[event.stream] = 'released';
        break;
      case 'PaymentSettled':
        delete state.open[event.stream];
        state.settled += 1;
        break;
      case 'PaymentSettlementFailed':
        delete state.open[event.stream];
        state.failed += 1;
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
    released: 0,
    settled: state.settled,
    failed: state.failed,
  };
  for (const phase of Object.values(state.open)) counts[phase] += 1;
  return counts;
}
