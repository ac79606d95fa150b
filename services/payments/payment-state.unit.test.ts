import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { decideReservation, foldPayment } from './payment-state.ts';

const ref = { nonce: `0x${'01'.repeat(32)}`, network: 'eip155:8453', asset: `0x${'02'.repeat(20)}` };
const authorized = {
  ...ref,
  payer: `0x${'03'.repeat(20)}`,
  payTo: `0x${'04'.repeat(20)}`,
  amount: '20000',
  resource: 'r',
  x402Version: 2,
  validAfter: '0',
  validBefore: '9',
  requestId: 'q',
};
let revision = 0;
function event(type: string, data: unknown): RecordedEvent {
  return {
    id: crypto.randomUUID(),
    type,
    stream: 'payment-x',
    revision: revision++,
    position: revision,
    recordedAt: new Date().toISOString(),
    correlationId: 'q',
    causationId: null,
    data,
  };
}

describe('payment reservation decisions', () => {
  it('reserves a new authorisation on "no stream"', () => {
    expect(decideReservation(null)).toEqual({ ok: true, expectedRevision: 'no_stream' });
  });

  it('lets a released authorisation be presented again, guarded by its revision', () => {
    revision = 0;
    const state = foldPayment([
      event('PaymentAuthorized', authorized),
      event('PaymentReleased', { ...ref, reason: 'x' }),
    ]);
    expect(state?.status).toBe('released');
    expect(decideReservation(state)).toEqual({ ok: true, expectedRevision: 1 });
  });

  it.each([
    [['PaymentAuthorized'], 'payment_in_use'],
    [['PaymentAuthorized', 'PaymentSettlementPending'], 'payment_in_use'],
    [['PaymentAuthorized', 'PaymentSettlementPending', 'PaymentSettled'], 'payment_already_used'],
    [['PaymentAuthorized', 'PaymentSettlementPending', 'PaymentSettlementFailed'], 'payment_already_failed'],
  ])('refuses after %j with %s', (types, reason) => {
    revision = 0;
    const data: Record<string, unknown> = {
      PaymentAuthorized: authorized,
      PaymentSettlementPending: { ...ref, submittedAt: new Date().toISOString() },
      PaymentSettled: { ...ref, payer: authorized.payer, amount: '20000', txHash: `0x${'05'.repeat(32)}` },
      PaymentSettlementFailed: { ...ref, reason: 'x' },
    };
    const state = foldPayment(types.map((t) => event(t, data[t])));
    expect(decideReservation(state)).toMatchObject({ ok: false, reason });
  });
});
