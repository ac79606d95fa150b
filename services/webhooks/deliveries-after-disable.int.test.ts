import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import { selfSignedCert } from '../../test/webhooks-receiver.ts';

/**
 * The delivery log (GET /api/webhooks/:id/deliveries) of a delivery whose retry a disable called
 * off, as a subscriber reads it on real parts (the API on a port, the relay, the dispatcher): it
 * failed, and no next attempt is named, whether the in-memory log still holds it or it has left
 * that log (WEBHOOK_DELIVERY_LOG_RETENTION) and `after_seq` reads it from the event log.
 */
const tls = selfSignedCert();

/** An HTTPS receiver answering 500 to its first request and 200 to every other. */
async function failingOnceReceiver() {
  let requests = 0;
  const server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(++requests === 1 ? 500 : 200).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

type Attempt = { outcome: string; next_attempt_at: string | null };
type Delivery = { delivery_id: string; seq: number; status: string; attempts: Attempt[] };

describe('a delivery whose retry its subscription disable called off', () => {
  let stack: WebhookStack;
  let receiver: Awaited<ReturnType<typeof failingOnceReceiver>>;

  beforeAll(async () => {
    // A failed first attempt is retried only after 10 minutes: never within the test. The in-memory
    // log keeps one finished delivery per subscription.
    stack = await startWebhookStack({
      bus: 'memory',
      env: { WEBHOOK_RETRY_SCHEDULE: '0,600000', WEBHOOK_DELIVERY_LOG_RETENTION: '1' },
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await failingOnceReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.close();
  });

  it('is failed with no next attempt, in memory and once read back from the event log', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['DISOFFA'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const page = async (path: string): Promise<Delivery[]> =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries${path}`, key)).body
        .deliveries as Delivery[];

    // The first delivery fails (500); its retry is scheduled 10 minutes on.
    await appendVerdict(stack.store, { coin: 'DISOFFA', call: 'BUY', confidence: 61 });
    const [scheduled] = await until(
      () => page(''),
      (d) => d[0]?.attempts[0]?.outcome === 'failed',
    );
    expect(scheduled).toMatchObject({ seq: 1, status: 'pending' });
    expect(scheduled!.attempts[0]!.next_attempt_at).not.toBeNull();

    // A pause and a plain re-enable call that retry off: the delivery has failed, and no attempt follows.
    expect((await stack.request('POST', `/api/webhooks/${id}/disable`, key)).status).toBe(200);
    expect((await stack.request('POST', `/api/webhooks/${id}/enable`, key)).status).toBe(200);
    const [inMemory] = await until(
      () => page(''),
      (d) => d[0]?.status === 'failed',
    );
    expect(inMemory!.attempts).toMatchObject([{ outcome: 'failed', next_attempt_at: null }]);

    // Two deliveries that succeed push it out of the in-memory log (retention 1).
    await appendVerdict(stack.store, { coin: 'DISOFFA', call: 'SELL', confidence: 62 });
    await appendVerdict(stack.store, { coin: 'DISOFFA', call: 'BUY', confidence: 63 });
    await until(
      () => page(''),
      (d) => d.length > 0 && d.every((x) => x.seq !== 1 && x.status === 'succeeded'),
    );

    // Read back from the event log, it is as it was: failed, no next attempt named.
    const [readBack] = await page('?after_seq=0&limit=1');
    expect(readBack).toMatchObject({ seq: 1, delivery_id: scheduled!.delivery_id, status: 'failed' });
    expect(readBack!.attempts).toMatchObject([{ outcome: 'failed', next_attempt_at: null }]);
  });
});
