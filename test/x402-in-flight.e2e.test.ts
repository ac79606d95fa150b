import { generatePaymentId } from '@x402/extensions/payment-identifier';
import type { Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AuthorizationFields,
  freshAuthorization,
  fromBase64Json,
  signAuthorization,
  startX402Stack,
  v2Header,
  type X402Stack,
} from './chain/x402-app.ts';
import { HoldingStore } from './holding-store.ts';

/**
 * A paid request presented while another request under the same payment (its authorisation, or
 * its payment id) is still in flight in this process, on anvil through real HTTP: only the same
 * request waits for the first one's answer; another request is a conflict at once.
 */

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const OTHER_BODY = { coin: 'ETH', timeframe: '1h' };
const PRICE = 20_000n;

let stack: X402Stack;
let accepted: Record<string, unknown>;
const store = new HoldingStore();

beforeAll(async () => {
  stack = await startX402Stack({}, undefined, undefined, { store });
  const res = await post(BODY, {});
  accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(res.headers.get('payment-required'))
    .accepts[0]!;
});
afterAll(async () => {
  await stack?.stop();
});

function post(body: unknown, headers: Record<string, string>) {
  return fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

function authFor(from: Hex): AuthorizationFields {
  return freshAuthorization(stack.payTo, from, PRICE);
}

/** A v2 PAYMENT-SIGNATURE, optionally under an x402 payment-identifier id. */
async function paymentHeader(key: Hex, auth: AuthorizationFields, paymentId?: string): Promise<string> {
  return v2Header(accepted, auth, await signAuthorization(key, auth), paymentId);
}

/**
 * Sends `first` and holds it once its tool has run, before its answer is kept (its payment
 * reserved, not handed off); sends `second` meanwhile. The first is let go once the second is
 * answered, or after 5 s: a second request that waits for the first (the fault) then gets its
 * answer rather than hanging the test.
 */
async function whileInFlight(first: () => Promise<Response>, second: () => Promise<Response>) {
  const held = store.holdNext('PaymentSettlementPending');
  const firstRes = first();
  await held.arrived;
  const secondRes = second();
  void Promise.race([secondRes, new Promise((resolve) => setTimeout(resolve, 5_000))]).finally(held.release);
  return { first: await firstRes, second: await secondRes };
}

describe('another request under a payment in flight', () => {
  it('a new authorisation under the same payment id asking for something else: 409 payment_identifier_conflict, not the first answer', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const id = generatePaymentId('pay_');
    const firstAuth = authFor(payer.address);
    const otherAuth = authFor(payer.address);
    const firstHeader = await paymentHeader(payer.key, firstAuth, id);
    const otherHeader = await paymentHeader(payer.key, otherAuth, id);
    const { first, second } = await whileInFlight(
      () => post(BODY, { 'payment-signature': firstHeader }),
      () => post(OTHER_BODY, { 'payment-signature': otherHeader }),
    );
    const refused = (await second.json()) as Record<string, unknown>;
    expect(second.status, JSON.stringify(refused)).toBe(409);
    expect(refused).toMatchObject({ code: 'payment_identifier_conflict' });
    expect(refused).not.toHaveProperty('regime');
    expect(second.headers.get('x-payment-replayed')).toBeNull();
    expect(second.headers.get('payment-required')).toBeNull();

    expect(first.status).toBe(200);
    await stack.x402.settled();
    // The first payment is charged once; the other authorisation is neither reserved nor used.
    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
    expect(await stack.chain.authorizationState(payer.address, otherAuth.nonce)).toBe(false);
    expect(await stack.paymentEvents(otherAuth.nonce, payer.address)).toEqual([]);
  });

  it('the same authorisation asking for something else: 409 payment_already_used, not the first answer', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const auth = authFor(payer.address);
    const header = await paymentHeader(payer.key, auth);
    const { first, second } = await whileInFlight(
      () => post(BODY, { 'payment-signature': header }),
      () => post(OTHER_BODY, { 'payment-signature': header }),
    );
    const refused = (await second.json()) as Record<string, unknown>;
    expect(second.status, JSON.stringify(refused)).toBe(409);
    expect(refused).toMatchObject({ code: 'payment_already_used' });
    expect(refused).not.toHaveProperty('regime');
    expect(second.headers.get('x-payment-replayed')).toBeNull();

    expect(first.status).toBe(200);
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
    expect((await stack.paymentEvents(auth.nonce, payer.address)).map((e) => e.type)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
  });

  it('the same request under the same authorisation still waits and gets the first answer', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const header = await paymentHeader(payer.key, authFor(payer.address));
    const { first, second } = await whileInFlight(
      () => post(BODY, { 'payment-signature': header }),
      () => post(BODY, { 'payment-signature': header }),
    );
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.headers.get('x-payment-replayed')).toBe('true');
    const { _service: _a, ...firstAnswer } = (await first.json()) as Record<string, unknown>;
    const { _service: _b, ...secondAnswer } = (await second.json()) as Record<string, unknown>;
    expect(secondAnswer).toEqual(firstAnswer);
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
  });
});
