import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { EventStoreUnavailableError } from '../adapters/event-store/port.ts';
import { debitedUnits } from '../services/metering/quota-projection.ts';
import {
  freshAuthorization,
  signAuthorization,
  startX402Stack,
  v1Header,
  type X402Stack,
} from './chain/x402-app.ts';

/**
 * A call whose answer is recorded (get_trade_call appends its verdict) while the event store is
 * out of reach: found by the fault drill across hosts (scripts/drill-hosts.ts), where keyed
 * calls during PostgreSQL's restart answered 500 INTERNAL_ERROR. It is the store's documented
 * retryable 503, and nothing is charged.
 */
class FlakyStore extends MemoryEventStore {
  down = false;
  override async append(...args: Parameters<MemoryEventStore['append']>) {
    if (this.down && args[1].some((e) => e.type === 'VerdictRecorded')) {
      // The adapter's words, with the server's address in them, as PostgreSQL's are when it is away.
      throw new EventStoreUnavailableError('postgres unreachable: connect ECONNREFUSED 10.0.3.7:5432');
    }
    return super.append(...args);
  }
}

let stack: X402Stack;
const store = new FlakyStore();
beforeAll(async () => {
  stack = await startX402Stack({}, undefined, undefined, { store });
});
afterAll(async () => {
  await stack?.stop();
});

// A market per case: a verdict already on record is served without a new append.
const tradeCall = (coin: string, headers: Record<string, string>) =>
  fetch(`${stack.url}/x402/get_trade_call`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ coin, timeframe: '1h', exchange: 'BINANCE' }),
  });

describe('a recorded answer while the event store is unavailable', () => {
  it('keyed: 503 event_store_unavailable, retryable, not debited; served again once the store is back', async () => {
    const { key } = await stack.issue('pro');
    store.down = true;
    const res = await tradeCall('BTC', { authorization: `Bearer ${key}` });
    expect(res.status).toBe(503);
    // The outage in the catalog's words: the store's address and the driver's error are for the
    // log and /readyz, not for whoever holds a key.
    expect(await res.json()).toMatchObject({
      code: 'event_store_unavailable',
      message: 'the event log is unreachable right now; retry shortly',
      retryable: true,
    });
    const debits = (await store.readAll()).reduce((sum, e) => sum + debitedUnits(e), 0);
    expect(debits).toBe(0);

    store.down = false;
    const again = await tradeCall('BTC', { authorization: `Bearer ${key}` });
    expect(again.status).toBe(200);
  });

  it('MCP: the tool result names the outage, not the address of the store', async () => {
    const { key } = await stack.issue('pro');
    store.down = true;
    try {
      const res = await fetch(`${stack.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: 'get_trade_call',
            arguments: { coin: 'SOL', timeframe: '1h', exchange: 'BINANCE' },
          },
        }),
      });
      const { result } = (await res.json()) as {
        result: { isError: boolean; content: { text: string }[]; structuredContent: Record<string, unknown> };
      };
      expect(result.isError).toBe(true);
      expect(result.structuredContent).toMatchObject({ code: 'event_store_unavailable', retryable: true });
      expect(result.content[0]!.text).toBe(
        'event_store_unavailable: the event log is unreachable right now; retry shortly',
      );
    } finally {
      store.down = false;
    }
  });

  it('paid: 503 event_store_unavailable, and the payment is released, not settled', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const auth = freshAuthorization(stack.payTo, payer.address, 20_000n);
    const signature = await signAuthorization(payer.key, auth);
    store.down = true;
    try {
      const res = await tradeCall('ETH', { 'x-payment': v1Header(auth, signature) });
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ code: 'event_store_unavailable', retryable: true });
    } finally {
      store.down = false;
    }
    const events = await stack.paymentEvents(auth.nonce, payer.address);
    expect(events.map((e) => e.type)).toEqual(['PaymentAuthorized', 'PaymentReleased']);
    expect(await stack.chain.authorizationState(payer.address, auth.nonce)).toBe(false);
  });
});
