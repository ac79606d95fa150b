import { describe, it } from 'vitest';
import { deciderSpec } from '../../test/decider-spec.ts';
import { type PaymentEvent, PaymentRuleError, paymentDecider } from './payment-state.ts';

const ref = { nonce: `0x${'01'.repeat(32)}`, network: 'eip155:8453', asset: `0x${'02'.repeat(20)}` };
const payer = `0x${'03'.repeat(20)}`;
const authorizedData = {
  ...ref,
  payer,
  payTo: `0x${'04'.repeat(20)}`,
  amount: '20000',
  resource: 'r',
  x402Version: 2 as const,
  validAfter: '0',
  validBefore: '9',
  requestId: 'q',
};
const T = `0x${'05'.repeat(32)}`;
const U = `0x${'06'.repeat(32)}`;
const submittedAt = '2026-01-01T00:00:00.000Z';

const authorized: PaymentEvent = { type: 'PaymentAuthorized', data: authorizedData, correlationId: 'q' };
const pending: PaymentEvent = {
  type: 'PaymentSettlementPending',
  data: { ...ref, submittedAt },
  correlationId: 'q',
};
const settledWith = (txHash: string): PaymentEvent => ({
  type: 'PaymentSettled',
  data: { ...ref, payer, amount: '20000', txHash },
  correlationId: 'q',
});
const failed: PaymentEvent = {
  type: 'PaymentSettlementFailed',
  data: { ...ref, reason: 'reverted' },
  correlationId: 'q',
};
const released: PaymentEvent = { type: 'PaymentReleased', data: { ...ref, reason: 'x' }, correlationId: 'q' };

const spec = deciderSpec(paymentDecider);
const refusedWith = (reason: string) => (err: Error) =>
  err instanceof PaymentRuleError && err.reason === reason;

describe('payment decider: reserve', () => {
  it('reserves a new authorisation', () => {
    spec.given([]).when({ kind: 'reserve', data: authorizedData }).thenEmits([authorized]);
  });

  it('reserves a released authorisation again', () => {
    spec
      .given([authorized, released])
      .when({ kind: 'reserve', data: authorizedData })
      .thenEmits([authorized]);
  });

  it.each([
    ['reserved', [authorized], 'payment_in_use'],
    ['pending', [authorized, pending], 'payment_in_use'],
    ['settled', [authorized, pending, settledWith(T)], 'payment_already_used'],
    ['failed', [authorized, pending, failed], 'payment_already_failed'],
  ])('refuses a %s authorisation', (_, given, reason) => {
    spec.given(given).when({ kind: 'reserve', data: authorizedData }).thenThrows(refusedWith(reason));
  });
});

describe('payment decider: steps after the reservation', () => {
  it('releases a reserved payment, with the reference of its authorisation', () => {
    spec.given([authorized]).when({ kind: 'release', reason: 'x' }).thenEmits([released]);
  });

  it('records pending after the reservation, and again once the transaction is known', () => {
    spec.given([authorized]).when({ kind: 'markPending', submittedAt }).thenEmits([pending]);
    spec
      .given([authorized, pending])
      .when({ kind: 'markPending', submittedAt, txHash: T })
      .thenEmits([
        { type: 'PaymentSettlementPending', data: { ...ref, submittedAt, txHash: T }, correlationId: 'q' },
      ]);
  });

  it('settles a pending payment, or a reserved one the chain shows used', () => {
    spec
      .given([authorized, pending])
      .when({ kind: 'settle', payer, amount: '20000', txHash: T })
      .thenEmits([settledWith(T)]);
    spec
      .given([authorized])
      .when({ kind: 'settle', payer, amount: '20000', txHash: T })
      .thenEmits([settledWith(T)]);
  });

  it('fails a pending payment', () => {
    spec.given([authorized, pending]).when({ kind: 'fail', reason: 'reverted' }).thenEmits([failed]);
  });

  it('takes "settled in T" recorded a second time (request and reconciler racing) as done', () => {
    spec
      .given([authorized, pending, settledWith(T)])
      .when({ kind: 'settle', payer, amount: '20000', txHash: T, reconciled: true })
      .thenNothing();
  });

  it('takes a pending or failed step after the outcome is recorded as done', () => {
    spec
      .given([authorized, pending, settledWith(T)])
      .when({ kind: 'markPending', submittedAt })
      .thenNothing();
    spec
      .given([authorized, pending, settledWith(T)])
      .when({ kind: 'fail', reason: 'x' })
      .thenNothing();
    spec.given([authorized, pending, failed]).when({ kind: 'fail', reason: 'x' }).thenNothing();
  });

  it('takes a settlement recorded with its transaction unknown ("0x", the reconciler) and the request\'s real hash as one settlement', () => {
    spec
      .given([authorized, pending, settledWith('0x')])
      .when({ kind: 'settle', payer, amount: '20000', txHash: T })
      .thenNothing();
    spec
      .given([authorized, pending, settledWith(T)])
      .when({ kind: 'settle', payer, amount: '20000', txHash: '0x', reconciled: true })
      .thenNothing();
  });

  it('refuses to settle in another transaction', () => {
    spec
      .given([authorized, pending, settledWith(T)])
      .when({ kind: 'settle', payer, amount: '20000', txHash: U })
      .thenThrows(refusedWith('payment_settled_differently'));
  });

  it.each([
    ['settle a released payment', [authorized, released], { kind: 'settle', payer, amount: '1', txHash: T }],
    [
      'settle a failed payment',
      [authorized, pending, failed],
      { kind: 'settle', payer, amount: '1', txHash: T },
    ],
    ['release a pending payment', [authorized, pending], { kind: 'release', reason: 'x' }],
    ['release a settled payment', [authorized, pending, settledWith(T)], { kind: 'release', reason: 'x' }],
    ['mark a released payment pending', [authorized, released], { kind: 'markPending', submittedAt }],
    ['fail a payment never submitted', [authorized], { kind: 'fail', reason: 'x' }],
    ['step a payment never reserved', [], { kind: 'release', reason: 'x' }],
  ] as const)('refuses to %s', (_, given, command) => {
    spec
      .given([...given])
      .when(command)
      .thenThrows(refusedWith('payment_transition_refused'));
  });
});

describe('payment decider: an answer given again while the reconciler ends the payment', () => {
  // The answer is kept at the hand-off; the same payment presented again (a replay) records that
  // it was served, decided on the state it read, while the reconciler may release (expired, its
  // answer reached no one) or fail it. Recorded first, the reconciler's step stands.
  const answer = { regime: 'ranging' };
  const handedOff: PaymentEvent = {
    type: 'PaymentSettlementPending',
    data: { ...ref, submittedAt, answer },
    correlationId: 'q',
  };
  const served: PaymentEvent = {
    type: 'PaymentAnswerServed',
    data: { ...ref, requestId: 'r' },
    correlationId: 'q',
  };
  const serve = { kind: 'serve', requestId: 'r' } as const;

  it('serves a handed-off payment once', () => {
    spec.given([authorized, handedOff]).when(serve).thenEmits([served]);
    spec.given([authorized, handedOff, served]).when(serve).thenNothing();
    spec
      .given([authorized, handedOff, served, settledWith(T)])
      .when(serve)
      .thenNothing();
  });

  it.each([
    ['released by the reconciler', [authorized, handedOff, released]],
    ['failed', [authorized, handedOff, failed]],
    ['reserved again after its release', [authorized, handedOff, released, authorized]],
  ])(
    'refuses to serve a payment %s after the replay read it pending (decided again on the stream as it is)',
    (_, given) => {
      // The replay decided on [authorized, handedOff] and appended at that revision; the store
      // refused it (the reconciler's event came first), and it is decided again on the stream now.
      spec.given([authorized, handedOff]).when(serve).thenEmits([served]);
      spec
        .given([...given])
        .when(serve)
        .thenThrows(refusedWith('payment_transition_refused'));
    },
  );

  it('refuses a plain failure of a payment whose kept answer was served; the seller’s loss is recorded', () => {
    spec
      .given([authorized, handedOff, served])
      .when({ kind: 'fail', reason: 'reverted' })
      .thenThrows(refusedWith('payment_already_served'));
    spec
      .given([authorized, handedOff, served])
      .when({ kind: 'fail', reason: 'expired', reconciled: true, sellerLoss: true })
      .thenEmits([
        {
          type: 'PaymentSettlementFailed',
          data: { ...ref, reason: 'expired', reconciled: true, sellerLoss: true },
          correlationId: 'q',
        },
      ]);
    // Not served yet, the request's refusal fails it.
    spec.given([authorized, handedOff]).when({ kind: 'fail', reason: 'reverted' }).thenEmits([failed]);
  });
});
