import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalChain, startLocalChain } from './chain/local-chain.ts';
import {
  authorizationJson,
  freshAuthorization,
  fromBase64Json,
  signAuthorization,
  startX402Stack,
  toBase64Json,
  type X402Stack,
} from './chain/x402-app.ts';

/**
 * A paid call replayed while its settlement is broadcast but not yet confirmed, on an anvil that
 * mines a block every 2 s (as Base does): the first answer names the broadcast transaction while
 * the log still records the payment pending without it, until the settle call ends. The replay
 * (a client retrying at once after a dropped connection) must get a receipt that the x402
 * clients read as paid, naming the same transaction, never `settlement_pending`.
 */

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const PRICE = 20_000n;

let chain: LocalChain;
let stack: X402Stack;
let accepted: Record<string, unknown>;

beforeAll(async () => {
  chain = await startLocalChain({ blockTime: 2 });
  stack = await startX402Stack({}, chain);
  const quote = await post({});
  accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(quote.headers.get('payment-required'))
    .accepts[0]!;
});
afterAll(async () => {
  await stack?.stop();
  await chain?.stop();
});

function post(headers: Record<string, string>) {
  return fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(BODY),
  });
}

describe('a replay during the settlement window', () => {
  it('names the broadcast transaction as paid, as the first answer did, and charges once', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const auth = freshAuthorization(stack.payTo, payer.address, PRICE);
    const header = toBase64Json({
      x402Version: 2,
      accepted,
      payload: {
        signature: await signAuthorization(payer.key, auth),
        authorization: authorizationJson(auth),
      },
    });
    const first = await post({ 'payment-signature': header });
    expect(first.status).toBe(200);
    const firstBody = (await first.json()) as {
      _service: { payment: { status: string; transaction: string } };
    };
    // The window this test is about: answered at the broadcast, before the block that confirms it.
    expect(firstBody._service.payment.status).toBe('pending');
    const transaction = firstBody._service.payment.transaction;
    expect(transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(fromBase64Json(first.headers.get('payment-response'))).toMatchObject({
      success: true,
      transaction,
    });

    const again = await post({ 'payment-signature': header });
    expect(again.status).toBe(200);
    expect(again.headers.get('x-payment-replayed')).toBe('true');
    expect(fromBase64Json(again.headers.get('payment-response'))).toMatchObject({
      success: true,
      transaction,
    });
    const body = (await again.json()) as { _service: { payment: { transaction: string | null } } };
    expect(body._service.payment.transaction).toBe(transaction);

    await stack.x402.settled();
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
  });
});
