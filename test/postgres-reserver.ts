/**
 * A child process of the cross-process payment test: tries to reserve every given nonce through
 * the real payment ledger, as an api replica on another host would for a replayed payment.
 * argv: url schema host nonce... ; prints the nonces this process won as JSON.
 */

import { openPostgresEventStore } from '../adapters/event-store/postgres.ts';
import { PaymentLedger } from '../services/payments/ledger.ts';

const [url, schema, host, ...nonces] = process.argv.slice(2) as [string, string, string, ...string[]];
const store = await openPostgresEventStore({ url, schema, poolSize: 4 });
const ledger = new PaymentLedger(store);
const won: string[] = [];
await Promise.all(
  nonces.map(async (nonce) => {
    const result = await ledger.reserve({
      nonce,
      network: 'eip155:8453',
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      payer: '0x00000000000000000000000000000000000000aa',
      payTo: '0x0000000000000000000000000000000000000001',
      amount: '20000',
      resource: 'get_trade_call',
      x402Version: 2,
      validAfter: '0',
      validBefore: '9999999999',
      requestId: `host-${host}-${nonce}`,
    });
    if (result.ok) won.push(nonce);
  }),
);
await store.close();
process.stdout.write(JSON.stringify(won));
