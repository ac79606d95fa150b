import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MarketFeed } from '../adapters/market/port.ts';
import { CURRENT_EVENT_VERSION, envelopeSchema } from '../contracts/webhook-schemas.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { rankMarkets } from '../services/engine/engine.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, HOURLY_DIGEST, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

/**
 * The stack on the digest clock `digestNow`, its feed's `markets` replaced when given, and a TLS
 * receiver: started before the describe's tests, closed after them.
 */
function digestStack(
  digestNow: () => number,
  markets?: (feed: MarketFeed, exchange: never) => Promise<unknown>,
) {
  const env = {} as { stack: WebhookStack; receiver: Receiver };
  beforeAll(async () => {
    env.stack = await startWebhookStack({
      settings: { tls: { ca: tls.cert } },
      digestNow,
      ...(markets
        ? {
            wrapFeed: (feed: MarketFeed) =>
              ({
                kind: feed.kind,
                now: () => feed.now(),
                markets: (exchange: never) => markets(feed, exchange),
                close: async () => {},
              }) as unknown as MarketFeed,
          }
        : {}),
    });
    env.receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await env.receiver?.close();
    await env.stack?.close();
  });
  return env;
}

/** Subscribes `key` to the hourly top-3 digest at the receiver's url. */
async function createDigest({ stack, receiver }: { stack: WebhookStack; receiver: Receiver }, key: string) {
  const created = await stack.request('POST', '/api/webhooks', key, {
    url: receiver.url,
    ...HOURLY_DIGEST,
  });
  expect(created.status).toBe(201);
  return created;
}

describe.runIf(reachable)('scan digests on their cadence', () => {
  let shift = 0;
  // The digest clock runs ahead on demand, so an hour boundary passes without waiting for it.
  const env = digestStack(() => Date.now() + shift);

  it('sends the ranked top-N once per period, signed', async () => {
    const { stack, receiver } = env;
    const key = await stack.issue();
    const created = await createDigest(env, key);
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.received).toHaveLength(0); // the period it was created in is not due
    shift = 3_600_000;
    await receiver.waitFor(1, 40_000);
    const got = receiver.received[0]!;
    expect(verifyWebhook({ secret: created.body.secret, headers: got.headers, rawBody: got.body }).ok).toBe(
      true,
    );
    const envelope = WebhookEnvelope.parse(JSON.parse(got.body));
    expect(envelope.data).toMatchObject({
      type: 'scan_digest',
      cadence: '1h',
      timeframe: '1h',
      exchange: 'BINANCE',
    });
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    // Each of the top 3 is listed (HOLD included) or named in skipped with its reason.
    expect(envelope.data.calls.length + envelope.data.skipped.length).toBe(3);
    for (const s of envelope.data.skipped) expect(s.reason).toMatch(/^no verdict recorded for /);
    if (envelope.data.calls.length === 0) expect(envelope.data.note).toBeTruthy();
    // Labelled with its feed; created_at on the wall clock like every other delivery's, not on
    // the digest clock (an hour ahead here), which only decides the period it covers.
    expect(envelope.data.feed).toBe('replay');
    expect(Date.parse(envelope.created_at)).toBeLessThanOrEqual(Date.now());
    expect(Date.parse(envelope.created_at)).toBeGreaterThan(Date.now() - 60_000);
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.received).toHaveLength(1); // once per period
  });
});

describe.runIf(reachable)('scan digests without a venue ranking', () => {
  let shift = 0;
  let rankingDown = true;
  // The venue ranking cannot be loaded until the test says so.
  const env = digestStack(
    () => Date.now() + shift,
    (feed, exchange) =>
      rankingDown ? Promise.reject(new Error('venue unreachable')) : feed.markets(exchange),
  );

  it('holds the digest back (unclaimed) until a ranking loads, then sends it in full', async () => {
    const { stack, receiver } = env;
    const key = await stack.issue();
    // Verdicts of the close the digest is of (a verdict of an earlier close is named in skipped).
    const hour = 3_600_000;
    const close = Math.floor((Date.now() + hour) / hour) * hour;
    for (const coin of ['ETH', 'BTC', 'SOL'])
      await appendVerdict(stack.store, { coin, call: 'BUY', confidence: 70, candleCloseTime: close });
    const created = await createDigest(env, key);
    shift = 3_600_000;
    await new Promise((r) => setTimeout(r, 1_000));
    expect(receiver.received).toHaveLength(0);
    const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries`, key);
    expect(log.body.deliveries).toEqual([]);
    rankingDown = false;
    await receiver.waitFor(1, 40_000);
    const envelope = WebhookEnvelope.parse(JSON.parse(receiver.received[0]!.body));
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    expect(envelope.data.calls.map((c) => c.coin).sort()).toEqual(['BTC', 'ETH', 'SOL']);
    expect(envelope.data.skipped).toEqual([]);
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.received).toHaveLength(1);
  });
});

describe.runIf(reachable)('a digest built at its period’s start', () => {
  let shift = 0;
  // The engine records the verdicts of the close at the period's start a moment after the digest
  // clock passes it: here, once the dispatcher has read the clock past it, as a live engine does
  // while it fetches that close's candles.
  let onPeriod: ((now: number) => void) | undefined;

  const env = digestStack(() => {
    const now = Date.now() + shift;
    if (shift > 0 && onPeriod) {
      const fire = onPeriod;
      onPeriod = undefined;
      fire(now);
    }
    return now;
  });

  it('lists the verdicts of the close at the start, not the close before it', async () => {
    const { stack, receiver } = env;
    const key = await stack.issue();
    const hour = 3_600_000;
    const coins = ['ETH', 'BTC', 'SOL'];
    const start = Math.floor((Date.now() + hour) / hour) * hour;
    // The close before the period's start: the latest on record when the clock passes it.
    for (const coin of coins)
      await appendVerdict(stack.store, { coin, call: 'HOLD', confidence: 50, candleCloseTime: start - hour });
    await createDigest(env, key);
    const fresh: Promise<string[]> = new Promise((resolve) => {
      onPeriod = (now) => {
        const close = Math.floor(now / hour) * hour;
        setTimeout(() => {
          void Promise.all(
            coins.map((coin) =>
              appendVerdict(stack.store, { coin, call: 'HOLD', confidence: 60, candleCloseTime: close }),
            ),
          ).then(resolve);
        }, 300);
      };
    });
    shift = hour;
    await receiver.waitFor(1, 40_000);
    const envelope = WebhookEnvelope.parse(JSON.parse(receiver.received[0]!.body));
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    expect(envelope.data.period_start).toBe(new Date(start).toISOString());
    expect(envelope.data.calls.map((c) => c.verdict_id).sort()).toEqual((await fresh).sort());
  });
});

describe.runIf(reachable)('a digest’s top-N', () => {
  let shift = 0;
  let dropped: string | undefined;
  // The venue's ranking as the feed gives it, less the market the test drops from it.
  const env = digestStack(
    () => Date.now() + shift,
    async (feed, exchange) =>
      (await feed.markets(exchange)).filter((m: { coin: string }) => m.coin !== dropped),
  );

  it('is the venue’s ranking at the digest’s close, as the scheduler records it', async () => {
    const { stack, receiver } = env;
    const key = await stack.issue();
    const hour = 3_600_000;
    const [a, b, c, d] = rankMarkets(await stack.engine.feed.markets('BINANCE'))
      .slice(0, 4)
      .map((m) => m.coin);
    const first = Math.floor((Date.now() + hour) / hour) * hour;
    for (const coin of [a!, b!, c!])
      await appendVerdict(stack.store, { coin, call: 'HOLD', confidence: 50, candleCloseTime: first });
    await createDigest(env, key);
    shift = hour;
    await receiver.waitFor(1, 40_000);
    // At the next close the venue ranks c below the top 3: the scheduler records d in its place.
    dropped = c;
    const fresh = await Promise.all(
      [a!, b!, d!].map((coin) =>
        appendVerdict(stack.store, { coin, call: 'HOLD', confidence: 60, candleCloseTime: first + hour }),
      ),
    );
    shift = 2 * hour;
    await receiver.waitFor(2, 40_000);
    const envelope = WebhookEnvelope.parse(JSON.parse(receiver.received[1]!.body));
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    expect(envelope.data.period_start).toBe(new Date(first + hour).toISOString());
    expect(envelope.data.calls.map((row) => row.verdict_id).sort()).toEqual(fresh.sort());
    expect(envelope.data.skipped).toEqual([]);
  });
});

describe.runIf(reachable)('scan digests at the payload version each subscription pinned', () => {
  let shift = 0;
  const env = digestStack(() => Date.now() + shift);

  it('version 2 rows name their verdict’s candle close; version 1 rows are the same without it', async () => {
    const { stack, receiver } = env;
    const key = await stack.issue();
    const hour = 3_600_000;
    const close = Math.floor((Date.now() + hour) / hour) * hour;
    // Each market's verdict of its own close: the digest's, or a later one.
    const closeOf = new Map<string, number>();
    for (const [coin, at] of [
      ['ETH', close],
      ['BTC', close + hour],
      ['SOL', close + 2 * hour],
    ] as const) {
      closeOf.set(
        await appendVerdict(stack.store, { coin, call: 'BUY', confidence: 70, candleCloseTime: at }),
        at,
      );
    }
    const v1Receiver = await startReceiver(tls);
    try {
      const v1 = await stack.request('POST', '/api/webhooks', key, {
        url: v1Receiver.url,
        ...HOURLY_DIGEST,
        event_version: 1,
      });
      expect(v1).toMatchObject({ status: 201, body: { event_version: 1 } });
      const v2 = await createDigest(env, key);
      expect(v2.body.event_version).toBe(CURRENT_EVENT_VERSION);
      expect(CURRENT_EVENT_VERSION).toBe(2);
      shift = hour;
      await receiver.waitFor(1, 40_000);
      await v1Receiver.waitFor(1, 40_000);

      const atV2 = receiver.received[0]!;
      expect(atV2.headers['x-service-event-version']).toBe('2');
      const body2 = JSON.parse(atV2.body);
      expect(envelopeSchema('scan_digest', 2).safeParse(body2).success).toBe(true);
      expect(body2.data.calls).toHaveLength(3);
      for (const row of body2.data.calls) {
        expect(row.candle_close_time, row.coin).toBe(closeOf.get(row.verdict_id)! / 1000);
      }

      const atV1 = v1Receiver.received[0]!;
      expect(atV1.headers['x-service-event-version']).toBe('1');
      const body1 = JSON.parse(atV1.body);
      expect(body1.event_version).toBe(1);
      expect(envelopeSchema('scan_digest', 1).safeParse(body1).success).toBe(true);
      expect(body1.data.calls).toHaveLength(3);
      for (const row of body1.data.calls) expect(row).not.toHaveProperty('candle_close_time');
      // The same rows: version 1's are version 2's without the close.
      expect(body1.data.calls).toEqual(
        body2.data.calls.map(({ candle_close_time: _, ...row }: { candle_close_time: number }) => row),
      );
    } finally {
      await v1Receiver.close();
    }
  });
});
