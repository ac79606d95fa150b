import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { paymentCounts, paymentStatesProjection } from './payment-states.ts';
import { foldEvents } from './projection.ts';

let position = 0;
function recorded(
  stream: string,
  revision: number,
  type: string,
  extra: Record<string, unknown> = {},
): RecordedEvent {
  position += 1;
  const ref = { nonce: `0x${'1'.repeat(64)}`, network: 'eip155:8453', asset: `0x${'2'.repeat(40)}` };
  const data: Record<string, unknown> =
    type === 'PaymentAuthorized'
      ? {
          ...ref,
          payer: `0x${'3'.repeat(40)}`,
          payTo: `0x${'4'.repeat(40)}`,
          amount: '20000',
          resource: 'http://localhost/x402/get_trade_call',
          x402Version: 2,
          validAfter: '0',
          validBefore: '2000000000',
          requestId: `r${position}`,
        }
      : type === 'PaymentSettled'
        ? { ...ref, txHash: `0x${'5'.repeat(64)}` }
        : { ...ref, reason: 'handler_failed' };
  return {
    id: crypto.randomUUID(),
    type,
    stream,
    revision,
    position,
    recordedAt: new Date(0).toISOString(),
    correlationId: 'c',
    causationId: null,
    data: { ...data, ...extra },
  };
}

describe('payment states', () => {
  it('counts released payments instead of keeping them, and counts one out when it is reserved again', () => {
    const events = [
      recorded('payment-a', 0, 'PaymentAuthorized'),
      recorded('payment-a', 1, 'PaymentReleased'),
      recorded('payment-b', 0, 'PaymentAuthorized'),
      recorded('payment-b', 1, 'PaymentReleased'),
      recorded('payment-b', 2, 'PaymentAuthorized'),
    ];
    const state = foldEvents(paymentStatesProjection, events);
    expect(Object.keys(state.open)).toEqual(['payment-b']);
    expect(paymentCounts(state)).toMatchObject({ authorized: 1, released: 1, settled: 0 });
  });

  it('counts a served answer whose settlement never landed as lost, apart from failed settlements', () => {
    const events = [
      recorded('payment-a', 0, 'PaymentAuthorized'),
      recorded('payment-a', 1, 'PaymentSettlementPending', { submittedAt: new Date(0).toISOString() }),
      recorded('payment-a', 2, 'PaymentSettlementFailed', { sellerLoss: true }),
      recorded('payment-b', 0, 'PaymentAuthorized'),
      recorded('payment-b', 1, 'PaymentSettlementPending', { submittedAt: new Date(0).toISOString() }),
      recorded('payment-b', 2, 'PaymentSettlementFailed'),
    ];
    const state = foldEvents(paymentStatesProjection, events);
    expect(paymentCounts(state)).toEqual({
      authorized: 0,
      pending: 0,
      released: 0,
      settled: 0,
      failed: 1,
      lost: 1,
    });
  });
});
