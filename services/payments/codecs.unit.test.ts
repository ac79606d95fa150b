import type { PaymentRequirements } from '@x402/core/types';
import { describe, expect, it } from 'vitest';
import { decodePaymentHeader, paymentResponseHeader, v1Accepts } from './codecs.ts';

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64');
const payload = {
  signature: `0x${'11'.repeat(65)}`,
  authorization: {
    from: `0x${'aa'.repeat(20)}`,
    to: `0x${'bb'.repeat(20)}`,
    value: '20000',
    validAfter: '0',
    validBefore: '99999999999',
    nonce: `0x${'cc'.repeat(32)}`,
  },
};
const accepted: PaymentRequirements = {
  scheme: 'exact',
  network: 'eip155:8453',
  asset: `0x${'dd'.repeat(20)}`,
  amount: '20000',
  payTo: `0x${'bb'.repeat(20)}`,
  maxTimeoutSeconds: 120,
  extra: { name: 'USD Coin', version: '2' },
};

describe('decodePaymentHeader', () => {
  it('returns null when no payment is attached', () => {
    expect(decodePaymentHeader({ paymentSignature: undefined, xPayment: undefined })).toBeNull();
  });

  it('prefers PAYMENT-SIGNATURE (v2) over X-PAYMENT (v1)', () => {
    const result = decodePaymentHeader({
      paymentSignature: b64({ x402Version: 2, accepted, payload }),
      xPayment: b64({ x402Version: 1, scheme: 'exact', network: 'base', payload }),
    });
    expect(result).toMatchObject({ ok: true, payment: { version: 2 } });
  });

  it('reads a v1 X-PAYMENT', () => {
    const result = decodePaymentHeader({
      paymentSignature: undefined,
      xPayment: b64({ x402Version: 1, scheme: 'exact', network: 'base', payload }),
    });
    expect(result).toEqual({
      ok: true,
      payment: { version: 1, scheme: 'exact', network: 'base', eip3009: payload },
    });
  });

  it.each([
    ['not base64', '***', 'X-PAYMENT: the payment header is not base64'],
    ['bad padding', 'abc', 'X-PAYMENT: the payment header is not base64'],
    // Empty is valid base64 (of nothing): said as what it is, not as a wrong encoding.
    [
      'empty',
      ' ',
      'X-PAYMENT: the payment header is empty; send the base64-encoded payment, or leave the header out to be quoted',
    ],
    [
      'not JSON',
      Buffer.from('hello').toString('base64'),
      'X-PAYMENT: the payment header is base64 but not JSON',
    ],
    [
      'a v2 body in X-PAYMENT',
      b64({ x402Version: 2, accepted, payload }),
      'X-PAYMENT carries an x402 v2 payment; send it in PAYMENT-SIGNATURE (X-PAYMENT takes v1)',
    ],
    [
      'the header sent twice (Node joins the two with a comma)',
      `${b64({ x402Version: 1, scheme: 'exact', network: 'base', payload })}, ${b64({ x402Version: 1, scheme: 'exact', network: 'base', payload })}`,
      'X-PAYMENT was sent more than once; send one payment in one X-PAYMENT header',
    ],
    [
      'a short nonce',
      b64({
        x402Version: 1,
        scheme: 'exact',
        network: 'base',
        payload: { ...payload, authorization: { ...payload.authorization, nonce: '0x01' } },
      }),
      'X-PAYMENT: payload.authorization.nonce must be a bytes32 hex nonce; got "0x01"',
    ],
  ])('refuses %s', (_name, value, message) => {
    const result = decodePaymentHeader({ paymentSignature: undefined, xPayment: value });
    expect(result).toMatchObject({ ok: false, reason: 'invalid_payment_header' });
    if (result && !result.ok) {
      if (typeof message === 'string') expect(result.message).toBe(message);
      else expect(result.message).toMatch(message);
    }
  });
});

describe('PAYMENT-SIGNATURE', () => {
  it('refuses a v1 payment, naming the header it goes in', () => {
    const result = decodePaymentHeader({
      paymentSignature: b64({ x402Version: 1, scheme: 'exact', network: 'base', payload }),
      xPayment: undefined,
    });
    expect(result).toEqual({
      ok: false,
      reason: 'invalid_payment_header',
      message:
        'PAYMENT-SIGNATURE carries an x402 v1 payment; send it in X-PAYMENT (PAYMENT-SIGNATURE takes v2)',
    });
  });
});

describe('v1 shapes', () => {
  it('maps CAIP-2 networks to v1 names and drops rails v1 cannot name', () => {
    const accepts = v1Accepts([accepted, { ...accepted, network: 'eip155:999999' }], 'http://x/r', 'd');
    expect(accepts).toEqual([
      {
        scheme: 'exact',
        network: 'base',
        maxAmountRequired: '20000',
        resource: 'http://x/r',
        description: 'd',
        mimeType: 'application/json',
        payTo: accepted.payTo,
        maxTimeoutSeconds: 120,
        asset: accepted.asset,
        extra: accepted.extra,
      },
    ]);
  });

  it('names the receipt header after the client version', () => {
    const settle = { success: true, transaction: '0xab', network: 'eip155:8453' as const, payer: '0x1' };
    const [v2Name, v2Value] = paymentResponseHeader(2, settle);
    const [v1Name, v1Value] = paymentResponseHeader(1, settle);
    expect(v2Name).toBe('PAYMENT-RESPONSE');
    expect(JSON.parse(Buffer.from(v2Value, 'base64').toString())).toMatchObject({ network: 'eip155:8453' });
    expect(v1Name).toBe('X-PAYMENT-RESPONSE');
    expect(JSON.parse(Buffer.from(v1Value, 'base64').toString())).toEqual({
      success: true,
      transaction: '0xab',
      network: 'base',
      payer: '0x1',
    });
  });
});
