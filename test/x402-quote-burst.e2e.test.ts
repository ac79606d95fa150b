import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startX402Stack, type X402Stack } from './chain/x402-app.ts';

/**
 * Unpaid quotes arriving together: after the first of a turn, a keyless quote is answered
 * without awaiting anything (services/payments/http/plugin.ts, quoteAtOnce). Every answer of a
 * burst must be the one the same request gets alone, and requests that are not a plain keyless
 * quote (a payment header, a key, a refused Content-Type or body) must never be answered with it.
 */
let stack: X402Stack;
const PATH = '/x402/get_trade_call';

beforeAll(async () => {
  stack = await startX402Stack();
});
afterAll(async () => {
  await stack?.stop();
});

interface Answer {
  status: number;
  paymentRequired: string | null;
  contentType: string | null;
  body: string;
}

async function post(body: string, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return {
    status: res.status,
    paymentRequired: res.headers.get('payment-required'),
    contentType: res.headers.get('content-type'),
    body: await res.text(),
  };
}

describe('a burst of unpaid quotes', () => {
  it('answers each request as it is answered alone, and nothing but a plain quote with a quote', async () => {
    const { key } = await stack.issue('pro');
    const hourly = JSON.stringify({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' });
    const minute = JSON.stringify({ coin: 'BTC', timeframe: '1m', exchange: 'BINANCE' });
    const kinds: Record<string, () => Promise<Answer>> = {
      hourly: () => post(hourly),
      minute: () => post(minute),
      paid: () => post(hourly, { 'x-payment': 'bm90IGEgcGF5bWVudA==' }),
      text: () => post(hourly, { 'content-type': 'text/plain' }),
      invalid: () => post(JSON.stringify({ coin: 5 })),
      keyed: () => post(hourly, { authorization: `Bearer ${key}` }),
    };
    // Alone, one at a time: the answers the burst must repeat.
    const alone: Record<string, Answer> = {};
    for (const [kind, send] of Object.entries(kinds)) alone[kind] = await send();
    expect(alone.hourly).toMatchObject({ status: 402, contentType: 'application/json; charset=utf-8' });
    expect(alone.minute!.status).toBe(402);
    expect(alone.minute!.paymentRequired).not.toBe(alone.hourly!.paymentRequired);
    expect(JSON.parse(alone.paid!.body)).toMatchObject({ code: 'invalid_payment_header' });
    expect(alone.text!.status).toBe(400);
    // An unpaid body that does not validate is still quoted, at the base price (1h's).
    expect(alone.invalid!.status).toBe(402);
    expect(alone.invalid!.paymentRequired).toBe(alone.hourly!.paymentRequired);
    expect(alone.keyed!.status).toBe(200);

    const order = Array.from({ length: 60 }, (_, i) => Object.keys(kinds)[i % 6]!);
    const burst = await Promise.all(order.map((kind) => kinds[kind]!()));
    burst.forEach((answer, i) => {
      const kind = order[i]!;
      if (kind === 'keyed') {
        // A keyed call debits its quota: the count in `_service` moves, the rest does not.
        expect(answer.status).toBe(200);
        expect(answer.paymentRequired).toBeNull();
        return;
      }
      expect({ kind, ...answer }).toEqual({ kind, ...alone[kind] });
    });
  });
});
