import type { RecordedEvent } from '../../contracts/envelope.ts';

/**
 * Representative stored events (a webhook delivery's sequence and outcome, a verdict, quota
 * debits) and strings at the edges of each compact form, whose stored bytes
 * lmdb-codec-bytes.unit.test.ts pins.
 */
const ID = '0190f5a8-7c3e-7000-8000-000000000001';
const UUID_V4 = '3b2f6c1e-9a4d-4e8b-b1c2-7d5e6f8a9b0c';
const HASH = 'ab'.repeat(32);
const AT = '2026-11-28T16:00:00.000Z';

const event = (
  type: string,
  stream: string,
  data: unknown,
  extra: Partial<RecordedEvent> = {},
): RecordedEvent => ({
  id: ID,
  type,
  stream,
  revision: 3,
  position: 42,
  recordedAt: AT,
  correlationId: ID,
  causationId: null,
  data,
  ...extra,
});

const body = JSON.stringify({ deliveryId: UUID_V4, event: 'trade_call', hash: HASH, createdAt: AT, seq: 1 });

export const RECORDS: Record<string, RecordedEvent> = {
  deliverySequenced: event('DeliverySequenced', `webhook-seq-${UUID_V4}`, {
    subscriptionId: UUID_V4,
    deliveryId: '7c9e6679-7425-40de-944b-e07fc1f90ae7',
    first: {
      deliveryId: '7c9e6679-7425-40de-944b-e07fc1f90ae7',
      subscriptionId: UUID_V4,
      attempt: 1,
      eventId: 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
      webhookEvent: 'trade_call',
      url: 'https://127.0.0.1:19443/hook',
      trigger: 'event',
      body,
      claimId: '0190f5a8-7c3e-7abc-8def-0123456789ab',
    },
  }),
  deliverySucceeded: event(
    'DeliverySucceeded',
    'delivery-7c9e6679-7425-40de-944b-e07fc1f90ae7',
    {
      deliveryId: '7c9e6679-7425-40de-944b-e07fc1f90ae7',
      subscriptionId: UUID_V4,
      attempt: 1,
      sentAt: '2026-11-28T16:00:00.123Z',
      queuedMs: 3,
      status: 200,
      latencyMs: 1.7,
      response: 'ok',
      seq: 7,
    },
    { correlationId: UUID_V4, causationId: 'f47ac10b-58cc-4372-a567-0e02b2c3d479' },
  ),
  verdictRecorded: event('VerdictRecorded', 'verdicts-BINANCE-BTC-1h', {
    exchange: 'BINANCE',
    coin: 'BTC',
    timeframe: '1h',
    call: 'BUY',
    confidence: 50,
    score: 0.5,
    regime: 'trending-up',
    price: 101.25,
    candleCloseTime: 1_700_003_600_000,
    feed: 'replay',
    engineVersion: 'test',
    inputs: { rsi: 55.5, closes: [1, 2.5, 3], note: null },
    hash: HASH,
    prevHash: `0x${'cd'.repeat(32)}`,
    trigger: 'schedule',
  }),
  quotaDebited: event('QuotaDebited', `quota-${HASH}`, {
    keyHash: HASH,
    units: 1,
    at: AT,
    requestId: UUID_V4,
  }),
  quotaDebitsRecorded: event('QuotaDebitsRecorded', `quota-${HASH}`, {
    debits: [
      { keyHash: HASH, units: 2, at: '2026-11-28T16:00:01.000Z', requestId: ID },
      { keyHash: HASH, units: 1, at: '2026-11-28T16:00:02.500Z', requestId: UUID_V4 },
    ],
  }),
  // Strings at the edges of each compact form, kept as text or compacted as the encoder decides.
  edges: event(
    'NotInTheCatalog',
    `verdict-outcome-${UUID_V4}`,
    {
      upperUuid: UUID_V4.toUpperCase(),
      uuidNoDashes: UUID_V4.replaceAll('-', ''),
      uuidBadDigit: `${UUID_V4.slice(0, 35)}g`,
      thirtySix: 'x'.repeat(36),
      hex31: 'a'.repeat(31),
      hex32: 'a'.repeat(32),
      hex33: 'a'.repeat(33),
      hexUpper: 'A'.repeat(64),
      hexAfterDash: `sub-${'0'.repeat(40)}`,
      prefix127: `${'p'.repeat(127)}${'1'.repeat(32)}`,
      prefix128: `${'p'.repeat(128)}${'1'.repeat(32)}`,
      uuidPrefix127: `${'p'.repeat(127)}${UUID_V4}`,
      uuidPrefix128: `${'p'.repeat(128)}${UUID_V4}`,
      nonAsciiPrefix: `é-${HASH}`,
      nonAsciiUuidPrefix: `é-${UUID_V4}`,
      controlPrefix: `\n${HASH}`,
      time: '2026-01-01T00:00:00.000Z',
      timeEpoch: '1970-01-01T00:00:00.000Z',
      timeNoMs: '2026-01-01T00:00:00Z',
      timeOffset: '2026-01-01T00:00:00.000+00:00',
      timeBadDay: '2026-02-30T00:00:00.000Z',
      timeBefore1970: '1969-12-31T23:59:59.999Z',
      timeLetters: '2026-01-01T00:00:00.00xZ',
      empty: '',
      short: 'sub_12',
      nested: [[UUID_V4, { deep: HASH }], 'plain', 1, true, null],
      notPlain: new Date(0),
      emoji: `🙂${'a'.repeat(40)}`,
    },
    { causationId: `cause-${HASH}`, correlationId: `${HASH}` },
  ),
};
