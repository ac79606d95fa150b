import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import { selfSignedCert } from '../../test/webhooks-receiver.ts';

/**
 * The delivery log (GET /api/webhooks/:id/deliveries) of a delivery resent after it left the
 * in-memory log (WEBHOOK_DELIVERY_LOG_RETENTION), as a subscriber reads it on real parts (the API on
 * a port, the relay, the dispatcher): every attempt, its first included, numbered by the requests
 * sent, in the newest-first listing and through `after_seq` alike.
 */
const tls = selfSignedCert();

async function okReceiver() {
  const server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200).end());
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

type Attempt = { attempt: number | null; trigger: string; outcome: string };
type Delivery = { delivery_id: string; seq: number; status: string; created_at: string; attempts: Attempt[] };

describe('a delivery resent after it left the in-memory log', () => {
  let stack: WebhookStack;
  let receiver: Awaited<ReturnType<typeof okReceiver>>;

  beforeAll(async () => {
    // The in-memory log keeps one finished delivery per subscription.
    stack = await startWebhookStack({
      bus: 'memory',
      env: { WEBHOOK_DELIVERY_LOG_RETENTION: '1' },
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await okReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.close();
  });

  it('lists its first attempt and the resend, numbered 1 and 2', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['RESENDA'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const page = async (path: string): Promise<Delivery[]> =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries${path}`, key)).body
        .deliveries as Delivery[];

    // Three deliveries succeed, one after the other; the first leaves the in-memory log.
    for (const [i, confidence] of [61, 62, 63].entries()) {
      await appendVerdict(stack.store, { coin: 'RESENDA', call: 'BUY', confidence });
      await until(
        () => page(''),
        (d) => d.some((x) => x.seq === i + 1 && x.status === 'succeeded'),
      );
    }
    await until(
      () => page(''),
      (d) => d.every((x) => x.seq !== 1),
    );
    const [first] = await page('?after_seq=0&limit=1');
    expect(first).toMatchObject({ seq: 1, status: 'succeeded' });
    expect(first!.attempts).toMatchObject([{ attempt: 1, trigger: 'event', outcome: 'succeeded' }]);

    // Resent, it is listed with both attempts, wherever it is read from.
    const resent = await stack.request(
      'POST',
      `/api/webhooks/${id}/deliveries/${first!.delivery_id}/resend`,
      key,
    );
    expect(resent.body).toMatchObject({ delivered: true });
    const both = [
      { attempt: 1, trigger: 'event', outcome: 'succeeded' },
      { attempt: 2, trigger: 'resend', outcome: 'succeeded' },
    ];
    const [afterSeq] = await until(
      () => page('?after_seq=0&limit=1'),
      (d) => d[0]?.attempts.some((a) => a.trigger === 'resend') === true,
    );
    expect(afterSeq).toMatchObject({ seq: 1, status: 'succeeded', created_at: first!.created_at });
    expect(afterSeq!.attempts).toMatchObject(both);
    const latest = (await page('')).find((d) => d.seq === 1);
    expect(latest).toMatchObject({ created_at: first!.created_at });
    expect(latest?.attempts).toMatchObject(both);
  });
});
