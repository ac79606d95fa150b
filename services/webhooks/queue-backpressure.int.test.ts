import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from '../../test/nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from '../../test/webhooks-harness.ts';
import { selfSignedCert } from '../../test/webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const EVENTS = 30;
const QUEUE_LIMIT = 2;

/**
 * A healthy receiver that holds every answer until `open()`: while it holds the first request
 * (one slot per endpoint), every other delivery waits in the endpoint's queue, far past its limit.
 */
async function gatedReceiver() {
  const bodies: string[] = [];
  const sockets = new Set<Socket>();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      void gate.then(() => res.writeHead(200).end('ok'));
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    bodies,
    open: release,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Attempt {
  attempt: number | null;
  outcome: string;
  error: string | null;
}

// Past the queue limit the waiting deliveries keep their bytes within WEBHOOK_QUEUE_BYTES_LIMIT (the
// default here); with it at 0 each is read back from the log, its sequence number put in again.
describe.runIf(reachable).each([
  ['keep their bytes', {}],
  ['have their bytes read back from the log', { WEBHOOK_QUEUE_BYTES_LIMIT: '0' }],
])('a healthy receiver behind a full endpoint queue, where waiting deliveries %s', (_, extra) => {
  let stack: WebhookStack;
  let receiver: Awaited<ReturnType<typeof gatedReceiver>>;

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: {
        WEBHOOK_ENDPOINT_CONCURRENCY: '1',
        WEBHOOK_ENDPOINT_QUEUE_LIMIT: String(QUEUE_LIMIT),
        // The held first request must not time out while the test waits for the queue to fill,
        // nor the waiting claims pass for stuck ones: neither is what this test is about.
        WEBHOOK_TIMEOUT_MS: '600000',
        WEBHOOK_STUCK_AFTER_MS: '600000',
        ...extra,
      },
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await gatedReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.close();
  });

  it('gets every event, in order, with no attempt recorded failed', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['BUSY'],
    });
    expect(created.status).toBe(201);
    const confidences = Array.from({ length: EVENTS }, (_, i) => 50 + i);
    for (const confidence of confidences)
      await appendVerdict(stack.store, { coin: 'BUSY', call: 'BUY', confidence });

    const deliveries = async () => {
      const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries?limit=100`, key);
      return log.body.deliveries as { seq: number; status: string; attempts: Attempt[] }[];
    };
    // Every delivery claimed while the receiver still holds the first request: one sending, the
    // rest (far more than the limit of 2) waiting in the endpoint's queue.
    await expect.poll(async () => (await deliveries()).length).toBe(EVENTS);
    await expect.poll(() => receiver.bodies.length).toBe(1);
    receiver.open();

    await expect
      .poll(async () => (await deliveries()).every((d) => d.status === 'succeeded') && receiver.bodies.length)
      .toBe(EVENTS);
    const received = receiver.bodies.map(
      (b) => JSON.parse(b) as { seq: number; data: { confidence: number } },
    );
    // In order: the receiver sees the sequence numbers 1…30 one after another, and the events in
    // the order they were recorded.
    expect(received.map((b) => b.seq)).toEqual(confidences.map((_, i) => i + 1));
    expect(received.map((b) => b.data.confidence)).toEqual(confidences);
    const attempts = (await deliveries()).flatMap((d) => d.attempts);
    expect(attempts).toHaveLength(EVENTS);
    expect(attempts.filter((a) => a.outcome !== 'succeeded')).toEqual([]);
    expect(attempts.every((a) => a.attempt === 1 && a.error === null)).toBe(true);
  });
});
