import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { signedHeaders, verifyWebhook } from './webhook-verify.ts';

const secret = `whsec_${'ab12'.repeat(12)}`;
const body = '{"event":"trade_call","delivery_id":"d1","created_at":"2025-01-01T00:00:00.000Z","data":{}}';
const now = 1_750_000_000;
const headers = signedHeaders({
  secret,
  event: 'trade_call',
  deliveryId: 'd1',
  timestamp: now,
  rawBody: body,
});

describe('webhook signatures', () => {
  it('signs hex HMAC-SHA256 of "{timestamp}.{rawBody}" keyed with the secret', () => {
    const independent = createHmac('sha256', secret).update(`${now}.${body}`).digest('hex');
    expect(headers['x-service-signature']).toBe(independent);
  });

  it('sends Standard Webhooks headers the standardwebhooks package accepts', () => {
    const fresh = signedHeaders({
      secret,
      event: 'trade_call',
      deliveryId: 'd1',
      timestamp: Math.floor(Date.now() / 1000),
      rawBody: body,
    });
    expect(new Webhook(secret).verify(body, fresh)).toMatchObject({ delivery_id: 'd1' });
    expect(() => new Webhook(secret).verify(`${body} `, fresh)).toThrow();
  });

  it('verifies a good delivery', () => {
    expect(verifyWebhook({ secret, headers, rawBody: body, now })).toEqual({
      ok: true,
      event: 'trade_call',
      deliveryId: 'd1',
      timestamp: now,
    });
    expect(
      verifyWebhook({ secret, headers: new Headers(headers), rawBody: Buffer.from(body), now: now + 300 }).ok,
    ).toBe(true);
  });

  it.each([
    ['a tampered body', { rawBody: body.replace('d1', 'd2') }, 'bad_signature'],
    ['another secret', { secret: `whsec_${'0'.repeat(48)}` }, 'bad_signature'],
    ['a timestamp 301 s old', { now: now + 301 }, 'outside_tolerance'],
    ['a timestamp 301 s ahead', { now: now - 301 }, 'outside_tolerance'],
    ['a tighter tolerance', { now: now + 61, toleranceSeconds: 60 }, 'outside_tolerance'],
    ['no signature', { headers: { ...headers, 'x-service-signature': undefined } }, 'missing_header'],
    ['a non-numeric timestamp', { headers: { ...headers, 'x-service-timestamp': '12a' } }, 'bad_timestamp'],
    [
      'a truncated signature',
      { headers: { ...headers, 'x-service-signature': headers['x-service-signature']!.slice(1) } },
      'bad_signature',
    ],
    [
      'a replayed signature with a new timestamp',
      { headers: { ...headers, 'x-service-timestamp': String(now + 1) } },
      'bad_signature',
    ],
  ])('rejects %s', (_name, patch, reason) => {
    expect(verifyWebhook({ secret, headers, rawBody: body, now, ...patch } as never)).toEqual({
      ok: false,
      reason,
    });
  });
});
