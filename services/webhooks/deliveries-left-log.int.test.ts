import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import { selfSignedCert } from '../../test/webhooks-receiver.ts';

/**
 * The delivery log (GET /api/webhooks/:id/deliveries) of deliveries that left the in-memory log
 * (WEBHOOK_DELIVERY_LOG_RETENTION), as a subscriber reads it on real parts (the API on a port, the
 * relay, the dispatcher), in the newest-first listing and through `after_seq` (read from the event
 * log) alike: one whose retry a disable called off has failed and names no next attempt; one resent
 * lists every attempt, its first included, numbered by the requests sent.
 */
const tls = selfSignedCert();

/** An HTTPS receiver answering each request with `status(n)`, n counting its requests from 1. */
async function receiver(status: (n: number) => number) {
  let requests = 0;
  const server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(status(++requests)).end());
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

type DisabledDelivery = {
  delivery_id: string;
  seq: number;
  status: string;
  attempts: { outcome: string; next_attempt_at: string | null }[];
};
type ResentDelivery = {
  delivery_id: string;
  seq: number;
  status: string;
  created_at: string;
  attempts: { attempt: number | null; trigger: string; outcome: string }[];
};

describe('deliveries that left the in-memory log', () => {
  let stack: WebhookStack;
  let failingOnce: Awaited<ReturnType<typeof receiver>>;
  let ok: Awaited<ReturnType<typeof receiver>>;

  beforeAll(async () => {
    // A failed first attempt is retried only after 10 minutes: never within the test. The in-memory
    // log keeps one finished delivery per subscription.
    stack = await startWebhookStack({
      bus: 'memory',
      env: { WEBHOOK_RETRY_SCHEDULE: '0,600000', WEBHOOK_DELIVERY_LOG_RETENTION: '1' },
      settings: { tls: { ca: tls.cert } },
    });
    failingOnce = await receiver((n) => (n === 1 ? 500 : 200));
    ok = await receiver(() => 200);
  });
  afterAll(async () => {
    await failingOnce?.close();
    await ok?.close();
    await stack?.close();
  });

  it('a retry a disable called off: failed with no next attempt, in memory and once read back from the event log', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: failingOnce.url,
      events: ['trade_call'],
      assets: ['DISOFFA'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const page = async (path: string): Promise<DisabledDelivery[]> =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries${path}`, key)).body
        .deliveries as DisabledDelivery[];

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
  it('a resend: lists its first attempt and the resend, numbered 1 and 2', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: ok.url,
      events: ['trade_call'],
      assets: ['RESENDA'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const page = async (path: string): Promise<ResentDelivery[]> =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries${path}`, key)).body
        .deliveries as ResentDelivery[];

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
