import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIGNATURE_HEADERS } from '../contracts/webhook-verify.ts';
import { requireNats } from './nats-server.ts';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)('webhook management API', () => {
  let stack: WebhookStack;
  let receiver: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({ settings: { tls: { ca: tls.cert } }, checkCoins: true });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.close();
  });

  it('requires a live key', async () => {
    expect((await stack.request('GET', '/api/webhooks', null)).status).toBe(401);
    const malformed = await fetch(`${stack.url}/api/webhooks`, { headers: { authorization: 'Token abc' } });
    expect(malformed.status).toBe(401);
    const unknown = await stack.request('GET', '/api/webhooks', `sk_live_${'A'.repeat(43)}`);
    expect(unknown).toMatchObject({ status: 401, body: { code: 'UNAUTHORIZED' } });
  });

  const base = () => ({ url: receiver.url, events: ['trade_call'] });

  it('sends Cache-Control: no-store on every keyed answer: the secret of a create and a rotation, the list, a refusal', async () => {
    const key = await stack.issue('no-store');
    const call = (method: string, path: string, body?: unknown, bearer: string | null = key) =>
      fetch(stack.url + path, {
        method,
        headers: {
          ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const created = await call('POST', '/api/webhooks', base());
    expect(created.status).toBe(201);
    const { id, secret } = (await created.json()) as { id: string; secret: string };
    expect(secret).toMatch(/^whsec_/);
    const rotated = await call('POST', `/api/webhooks/${id}/rotate-secret`, { overlap_seconds: 0 });
    expect(rotated.status).toBe(200);
    expect(((await rotated.json()) as { secret: string }).secret).toMatch(/^whsec_/);
    const answers = [
      created,
      rotated,
      await call('GET', '/api/webhooks'),
      await call('GET', `/api/webhooks/${id}/deliveries`),
      await call('GET', '/api/webhooks', undefined, null),
      await call('POST', '/api/webhooks', { ...base(), events: [] }),
      await call('DELETE', `/api/webhooks/${id}`),
    ];
    expect(answers.map((res) => [res.url, res.status, res.headers.get('cache-control')])).toEqual(
      answers.map((res) => [res.url, res.status, 'no-store']),
    );
  });
  const violations: [string, Record<string, unknown>, string][] = [
    ['missing url', { url: undefined }, 'url'],
    ['missing events', { events: undefined }, 'events'],
    ['empty events', { events: [] }, 'events'],
    ['unknown event', { events: ['price_tick'] }, 'events.0'],
    ['repeated event', { events: ['trade_call', 'trade_call'] }, 'events'],
    ['bad timeframe', { timeframes: ['7m'] }, 'timeframes.0'],
    ['asset top:0', { assets: ['top:0'] }, 'assets.0'],
    ['asset top:101', { assets: ['top:101'] }, 'assets.0'],
    ['asset top:x', { assets: ['top:x'] }, 'assets.0'],
    ['asset symbol with dash', { assets: ['BTC-USD'] }, 'assets.0'],
    ['min_confidence 101', { min_confidence: 101 }, 'min_confidence'],
    ['min_confidence -1', { min_confidence: -1 }, 'min_confidence'],
    ['min_confidence 1.5', { min_confidence: 1.5 }, 'min_confidence'],
    ['min_confidence on risk_shift alone', { events: ['risk_shift'], min_confidence: 50 }, 'min_confidence'],
    [
      'digest without cadence',
      { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: 5 },
      'cadence',
    ],
    [
      'digest cadence 2h',
      { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: 5, cadence: '2h' },
      'cadence',
    ],
    [
      'digest top_n 0',
      { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: 0, cadence: '1h' },
      'top_n',
    ],
    [
      'digest bad exchange',
      { events: ['scan_digest'], timeframe: '1h', exchange: 'NYSE', top_n: 5, cadence: '1h' },
      'exchange',
    ],
    ['digest fields without digest', { top_n: 5 }, 'top_n'],
    ['repeated asset, another case', { assets: ['BTC', 'btc'] }, 'assets'],
    ['repeated top:N', { assets: ['top:20', 'TOP:20'] }, 'assets'],
    ['two top:N', { assets: ['top:5', 'top:10'] }, 'assets'],
    ['two top:N beside a coin', { assets: ['BTC', 'top:5', 'top:10'] }, 'assets'],
    [
      'digest with top_n null',
      { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: null, cadence: '1h' },
      'top_n',
    ],
    [
      'digest with timeframes',
      {
        events: ['scan_digest'],
        timeframe: '1h',
        exchange: 'BINANCE',
        top_n: 5,
        cadence: '1h',
        timeframes: ['4h'],
      },
      'timeframes',
    ],
    [
      'digest with assets',
      {
        events: ['scan_digest'],
        timeframe: '1h',
        exchange: 'BINANCE',
        top_n: 5,
        cadence: '1h',
        assets: ['BTC'],
      },
      'assets',
    ],
    ['disabled notice with assets', { events: ['subscription_disabled'], assets: ['BTC'] }, 'assets'],
    ['unknown field', { colour: 'blue' }, 'colour'],
    ['http url', { url: 'http://example.com/hook' }, 'url'],
    ['private url', { url: 'https://10.0.0.1/hook' }, 'url'],
    ['url with a fragment', { url: 'https://example.com/hook#frag' }, 'url'],
  ];

  it.each(violations)('rejects %s with a 400 naming the field', async (_name, patch, field) => {
    const key = await stack.issue();
    const res = await stack.request('POST', '/api/webhooks', key, { ...base(), ...patch });
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    expect(res.body.message).toBeTruthy();
  });

  it('words the refusals of repeated assets and of filters a digest would ignore', async () => {
    const key = await stack.issue();
    const repeated = await stack.request('POST', '/api/webhooks', key, { ...base(), assets: ['BTC', 'btc'] });
    expect(repeated.body).toMatchObject({ code: 'INVALID_FIELD', field: 'assets' });
    expect(repeated.body.message).toContain('assets must not repeat');
    const digest = { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: 5, cadence: '1h' };
    for (const [field, value] of [
      ['timeframes', ['4h']],
      ['assets', ['BTC']],
    ] as const) {
      const res = await stack.request('POST', '/api/webhooks', key, { ...base(), ...digest, [field]: value });
      expect(res.body).toMatchObject({ code: 'INVALID_FIELD', field });
      expect(res.body.message).toContain(`${field} applies only to trade_call, regime_shift and risk_shift`);
    }
    // Beside a filtered event they filter it: accepted.
    const mixed = await stack.request('POST', '/api/webhooks', key, {
      ...base(),
      ...digest,
      events: ['scan_digest', 'trade_call'],
      assets: ['BTC'],
    });
    expect(mixed.status, JSON.stringify(mixed.body)).toBe(201);
  });

  it('takes a filter given null on create as no filter, as when it is left out (PATCH removes one so)', async () => {
    const key = await stack.issue();
    const res = await stack.request('POST', '/api/webhooks', key, {
      ...base(),
      timeframes: null,
      assets: null,
      min_confidence: null,
      timeframe: null,
      exchange: null,
      top_n: null,
      cadence: null,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const omitted = await stack.request('POST', '/api/webhooks', key, base());
    const settings = (body: Record<string, unknown>) => {
      const { id: _id, secret: _secret, created_at: _at, _service, ...rest } = body;
      return rest;
    };
    expect(settings(res.body)).toEqual(settings(omitted.body));
    expect(res.body).not.toHaveProperty('assets');
    expect(res.body).not.toHaveProperty('min_confidence');
  });

  it('refuses two top:N tokens in assets on create and PATCH; one beside coins is their union', async () => {
    const key = await stack.issue();
    const two = await stack.request('POST', '/api/webhooks', key, { ...base(), assets: ['top:5', 'top:10'] });
    expect(two.body).toMatchObject({ code: 'INVALID_FIELD', field: 'assets' });
    expect(two.body.message).toBe(
      'assets may hold one top:N (got top:5, top:10): an event passes when its coin is listed or ranks in the top N, so the largest alone decides',
    );
    const one = await stack.request('POST', '/api/webhooks', key, { ...base(), assets: ['BTC', 'top:5'] });
    expect(one.status, JSON.stringify(one.body)).toBe(201);
    const patched = await stack.request('PATCH', `/api/webhooks/${one.body.id}`, key, {
      assets: ['top:5', 'top:20'],
    });
    expect(patched).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'assets' } });
  });

  it('names every digest field in one refusal: all four a digest lacks, all a PATCH leaving scan_digest keeps', async () => {
    const key = await stack.issue();
    const missing = await stack.request('POST', '/api/webhooks', key, { ...base(), events: ['scan_digest'] });
    expect(missing.body).toMatchObject({ code: 'INVALID_FIELD', field: 'timeframe' });
    expect(missing.body.message).toBe(
      'timeframe is required for scan_digest, and so are exchange, top_n and cadence',
    );
    const stray = await stack.request('POST', '/api/webhooks', key, { ...base(), top_n: 5, cadence: '1h' });
    expect(stray.body).toMatchObject({ code: 'INVALID_FIELD', field: 'top_n' });
    expect(stray.body.message).toBe(
      'top_n applies only to scan_digest, and so does cadence: leave them out, or give them null in a PATCH',
    );
    const digest = { events: ['scan_digest'], timeframe: '1h', exchange: 'BINANCE', top_n: 5, cadence: '1h' };
    const sub = await stack.request('POST', '/api/webhooks', key, { ...base(), ...digest });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    const path = `/api/webhooks/${sub.body.id}`;
    const kept = await stack.request('PATCH', path, key, { events: ['trade_call'] });
    expect(kept).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'timeframe' } });
    expect(kept.body.message).toBe(
      'timeframe applies only to scan_digest, and so do exchange, top_n and cadence: leave them out, or give them null in a PATCH',
    );
    const cleared = await stack.request('PATCH', path, key, {
      events: ['trade_call'],
      timeframe: null,
      exchange: null,
      top_n: null,
      cadence: null,
    });
    expect(cleared.status, JSON.stringify(cleared.body)).toBe(200);
    expect(cleared.body.events).toEqual(['trade_call']);
    expect(cleared.body).not.toHaveProperty('top_n');
  });

  it('refuses a body in any media type but JSON alike: 415 UNSUPPORTED_MEDIA_TYPE, text/plain as a form', async () => {
    const key = await stack.issue();
    const sub = (await stack.request('POST', '/api/webhooks', key, base())).body;
    const json = JSON.stringify(base());
    const answers = [];
    for (const [method, path] of [
      ['POST', '/api/webhooks'],
      ['PATCH', `/api/webhooks/${sub.id}`],
    ] as const) {
      for (const type of [
        'text/plain',
        'text/plain; charset=utf-8',
        'application/x-www-form-urlencoded',
        'application/xml',
      ]) {
        const res = await fetch(`${stack.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${key}`, 'content-type': type },
          body: type.includes('form') ? 'url=https%3A%2F%2Fexample.com' : json,
        });
        const { _service, ...body } = (await res.json()) as Record<string, unknown>;
        answers.push([method, type, res.status, body]);
      }
    }
    expect(answers).toEqual(
      answers.map(([method, type]) => [
        method,
        type,
        415,
        { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send the body as application/json' },
      ]),
    );
    // A body of no bytes is no body whatever its type: a bodiless route is served.
    const empty = await fetch(`${stack.url}/api/webhooks/${sub.id}/test`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' },
    });
    expect(empty.status).toBe(200);
  });

  it('refuses a recover_since in the future, an unknown delivery-log or list parameter and one given twice', async () => {
    const key = await stack.issue();
    const sub = (await stack.request('POST', '/api/webhooks', key, base())).body;
    const future = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: new Date(Date.now() + 3_600_000).toISOString(),
    });
    expect(future).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'recover_since' } });
    expect(future.body.message).toContain('in the future');
    // A minute ahead (a client's clock running fast) is not the future.
    const skewed = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: new Date(Date.now() + 60_000).toISOString(),
    });
    expect(skewed.status, JSON.stringify(skewed.body)).toBe(200);
    const past = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: new Date(Date.now() - 60_000).toISOString(),
    });
    expect(past.status).toBe(200);
    const log = `/api/webhooks/${sub.id}/deliveries`;
    const unknown = await stack.request('GET', `${log}?foo=1`, key);
    expect(unknown).toMatchObject({ status: 400, body: { code: 'UNKNOWN_FILTER', field: 'foo' } });
    expect(unknown.body.message).toBe('unknown parameter "foo"; known: limit, after_seq');
    const twice = await stack.request('GET', `${log}?limit=2&limit=3`, key);
    expect(twice).toMatchObject({
      status: 400,
      body: { code: 'INVALID_PARAMETER', field: 'limit', message: 'limit may be given once' },
    });
    expect((await stack.request('GET', `${log}?limit=2&after_seq=0`, key)).status).toBe(200);
    // A whole number ≥ 0 past the largest seq the log can number: the bound it broke is named.
    const huge = await stack.request('GET', `${log}?after_seq=99999999999999999999`, key);
    expect(huge).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'after_seq' } });
    expect(huge.body.message).toBe(
      'after_seq must be a whole number from 0 to 9007199254740991; got "99999999999999999999"',
    );
    // The list takes only status: another parameter is refused, not ignored.
    const listed = await stack.request('GET', '/api/webhooks?foo=1', key);
    expect(listed).toMatchObject({ status: 400, body: { code: 'UNKNOWN_FILTER', field: 'foo' } });
    expect(listed.body.message).toBe('unknown parameter "foo"; known: status');
    expect((await stack.request('GET', '/api/webhooks', key)).status).toBe(200);
    // Every keyed route refuses a parameter it does not take, before it acts: nothing is deleted.
    const before = (await stack.request('GET', '/api/webhooks', key)).body.webhooks.length;
    for (const [method, path, body] of [
      ['DELETE', `/api/webhooks/${sub.id}?force=1`, undefined],
      ['POST', `/api/webhooks/${sub.id}/test?x=1`, undefined],
      ['POST', `/api/webhooks/${sub.id}/rotate-secret?x=1`, undefined],
      ['POST', '/api/webhooks?x=1', base()],
    ] as const) {
      const refused = await stack.request(method, path, key, body);
      expect(refused, `${method} ${path}`).toMatchObject({ status: 400, body: { code: 'UNKNOWN_FILTER' } });
    }
    expect((await stack.request('GET', log, key)).status).toBe(200);
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks.length).toBe(before);
  });

  it('refuses a coin no venue lists, as the tools do, and writes nothing', async () => {
    const key = await stack.issue();
    const before = (await stack.store.readAll()).length;
    const res = await stack.request('POST', '/api/webhooks', key, { ...base(), assets: ['BTC', 'NOPECOIN'] });
    expect(res).toMatchObject({ status: 404, body: { code: 'unknown_coin', field: 'assets' } });
    expect(res.body.message).toContain('NOPECOIN');
    expect(res.body.message).not.toContain('BTC ');
    expect((await stack.store.readAll()).length).toBe(before);
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks).toEqual([]);
    // Lower case is the same coin; top:N is not a coin and is not looked up.
    const ok = await stack.request('POST', '/api/webhooks', key, { ...base(), assets: ['eth', 'top:3'] });
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
  });

  it('keeps keys apart: another key sees nothing and gets 404, never 403', async () => {
    const alice = await stack.issue('alice');
    const bob = await stack.issue('bob');
    const created = await stack.request('POST', '/api/webhooks', alice, {
      ...base(),
      assets: ['BTC', 'top:10'],
    });
    expect(created.status).toBe(201);
    expect(created.body.assets).toEqual(['BTC', 'top:10']);
    const id = created.body.id;
    expect((await stack.request('GET', '/api/webhooks', bob)).body.webhooks).toEqual([]);
    for (const [method, path] of [
      ['DELETE', `/api/webhooks/${id}`],
      ['POST', `/api/webhooks/${id}/test`],
      ['GET', `/api/webhooks/${id}/deliveries`],
      ['POST', `/api/webhooks/${id}/enable`],
      ['POST', `/api/webhooks/${id}/deliveries/x/resend`],
    ] as const) {
      const res = await stack.request(
        method,
        path,
        bob,
        method === 'POST' && path.endsWith('enable') ? {} : undefined,
      );
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    const listed = (await stack.request('GET', '/api/webhooks', alice)).body.webhooks;
    expect(listed).toHaveLength(1);
    expect(listed[0]).not.toHaveProperty('secret');
    expect(JSON.stringify(await stack.store.readAll())).not.toContain(created.body.secret);
    expect((await stack.request('DELETE', `/api/webhooks/${id}`, alice)).status).toBe(200);
    expect((await stack.request('GET', '/api/webhooks', alice)).body.webhooks).toEqual([]);
    expect((await stack.request('DELETE', `/api/webhooks/${id}`, alice)).status).toBe(404);
  });

  it('caps subscriptions per key (5 here), and frees a slot on delete', async () => {
    const key = await stack.issue();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await stack.request('POST', '/api/webhooks', key, base())).body.id);
    const over = await stack.request('POST', '/api/webhooks', key, base());
    expect(over).toMatchObject({ status: 409, body: { code: 'SUBSCRIPTION_LIMIT' } });
    await stack.request('DELETE', `/api/webhooks/${ids[0]}`, key);
    expect((await stack.request('POST', '/api/webhooks', key, base())).status).toBe(201);
  });

  it('holds the cap under concurrent creates', async () => {
    const key = await stack.issue();
    const results = await Promise.all(
      Array.from({ length: 8 }, () => stack.request('POST', '/api/webhooks', key, base())),
    );
    const created = results.filter((r) => r.status === 201).length;
    expect(created).toBeLessThanOrEqual(5);
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks.length).toBeLessThanOrEqual(5);
  });

  it("points a test delivery's verify_url at something that says it is a sample", async () => {
    const key = await stack.issue();
    const { body } = await stack.request('POST', '/api/webhooks', key, base());
    const before = receiver.received.length;
    const test = await stack.request('POST', `/api/webhooks/${body.id}/test`, key);
    expect(test.body).toMatchObject({ delivered: true, status: 200 });
    const sent = JSON.parse(receiver.received[before]!.body);
    expect(sent.test).toBe(true);
    const verify = await stack.request('GET', new URL(sent.data.verify_url).pathname, null);
    expect(verify.status).toBe(200);
    expect(verify.body).toMatchObject({ sample: true });
    expect(verify.body.message).toMatch(/test delivery/);
  });

  it('refuses a field in a test request, as enable and rotate-secret do, and sends nothing', async () => {
    const key = await stack.issue();
    const { body } = await stack.request('POST', '/api/webhooks', key, base());
    const before = receiver.received.length;
    for (const path of ['test', 'enable', 'rotate-secret']) {
      const refused = await stack.request('POST', `/api/webhooks/${body.id}/${path}`, key, { x: 1 });
      expect(refused, path).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'x' } });
    }
    expect(receiver.received.length).toBe(before);
    const empty = await stack.request('POST', `/api/webhooks/${body.id}/test`, key, {});
    expect(empty.body).toMatchObject({ delivered: true, status: 200 });
  });

  it('refuses a literal JSON null body on test, enable, rotate-secret and resend (no body or an object), and changes nothing', async () => {
    const key = await stack.issue();
    const { body } = await stack.request('POST', '/api/webhooks', key, base());
    const sent = await stack.request('POST', `/api/webhooks/${body.id}/test`, key);
    expect(sent.body).toMatchObject({ delivered: true });
    const before = receiver.received.length;
    const paths = ['test', 'enable', 'rotate-secret', `deliveries/${sent.body.delivery_id}/resend`];
    for (const path of paths) {
      // Refused as an array is: the documented 400 in the catalog shape, naming the body.
      const [nulled, array] = await Promise.all(
        [null, []].map((payload) => stack.request('POST', `/api/webhooks/${body.id}/${path}`, key, payload)),
      );
      expect(array, path).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'body' } });
      expect(nulled, path).toEqual(array);
    }
    expect(receiver.received.length).toBe(before);
    // No rotation began: a delivery now carries no second signature (a rotation's overlap adds one).
    await stack.request('POST', `/api/webhooks/${body.id}/test`, key);
    expect(receiver.received[before]!.headers[SIGNATURE_HEADERS.signatureNew]).toBeUndefined();
  });

  it('reports a failed test delivery with its status', async () => {
    const key = await stack.issue();
    const failing = await startReceiver(tls);
    failing.behave = () => ({ status: 500 });
    try {
      const { body } = await stack.request('POST', '/api/webhooks', key, { ...base(), url: failing.url });
      const test = await stack.request('POST', `/api/webhooks/${body.id}/test`, key);
      expect(test.body).toMatchObject({ delivered: false, status: 500, error: 'HTTP 500' });
    } finally {
      await failing.close();
    }
  });

  it('refuses the 11th test send of a key within the minute, 429 with Retry-After; another key is not affected', async () => {
    const key = await stack.issue();
    const { body } = await stack.request('POST', '/api/webhooks', key, base());
    const send = (k: string, id: string) =>
      fetch(`${stack.url}/api/webhooks/${id}/test`, {
        method: 'POST',
        headers: { authorization: `Bearer ${k}` },
      });
    for (let i = 0; i < 10; i++) expect((await send(key, body.id)).status, `send ${i + 1}`).toBe(200);
    const before = receiver.received.length;
    const refused = await send(key, body.id);
    expect(refused.status).toBe(429);
    const seconds = Number(refused.headers.get('retry-after'));
    expect(seconds).toBeGreaterThanOrEqual(1);
    expect(seconds).toBeLessThanOrEqual(60);
    const refusal = (await refused.json()) as { message: string; retry_after_ms: number };
    expect(refusal).toMatchObject({ code: 'RATE_LIMITED', retryable: true });
    expect(refusal.message).toMatch(/^test sends of this key are limited to 10 a minute per api process/);
    expect(refusal.retry_after_ms).toBeGreaterThan((seconds - 1) * 1_000);
    expect(refusal.retry_after_ms).toBeLessThanOrEqual(seconds * 1_000);
    expect(receiver.received.length).toBe(before);
    // Another key, on its own subscription, still sends.
    const other = await stack.issue();
    const theirs = await stack.request('POST', '/api/webhooks', other, base());
    const sent = await send(other, theirs.body.id);
    expect(sent.status).toBe(200);
    expect(await sent.json()).toMatchObject({ delivered: true, status: 200 });
  });

  // Last: it leaves the key registry stopped.
  it('answers 503 KEY_UNVERIFIABLE, retryable, before the body, while keys cannot be checked', async () => {
    const key = await stack.issue();
    await stack.keys.stop();
    for (const [method, body] of [
      ['GET', undefined],
      ['POST', { events: [] }],
    ] as const) {
      const res = await stack.request(method, '/api/webhooks', key, body);
      expect([method, res.status]).toEqual([method, 503]);
      expect(res.body).toMatchObject({ code: 'KEY_UNVERIFIABLE', retryable: true });
    }
  });
});
