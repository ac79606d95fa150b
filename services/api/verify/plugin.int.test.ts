import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../../adapters/event-store/memory.ts';
import { verdictHash } from '../../../contracts/verdict-hash.ts';
import { recordVerdict, type VerdictDraft, verdictStream } from '../../engine/verdict-recorder.ts';
import { Readiness } from '../../shared/readiness.ts';
import { buildApp } from '../app.ts';
import { verifyRoutes } from './plugin.ts';

const HOUR = 3_600_000;
const T0 = 1_760_000_000_000;
const draft = (i: number, regime: VerdictDraft['regime']): VerdictDraft => ({
  exchange: 'BINANCE',
  coin: 'BTC',
  timeframe: '1h',
  call: 'SELL',
  confidence: 44,
  score: 0.3,
  regime,
  price: 100_000 + i,
  candleCloseTime: T0 + i * HOUR,
  feed: 'replay',
  engineVersion: 'test',
  inputs: { rsi: 61 },
  trigger: 'request',
});

let app: FastifyInstance | null = null;
afterEach(async () => {
  await app?.close();
});

/** The real in-memory store, counting stream reads: how often an answer was computed. */
class CountingStore extends MemoryEventStore {
  reads = 0;
  override readStream(...args: Parameters<MemoryEventStore['readStream']>) {
    this.reads++;
    return super.readStream(...args);
  }
}

/** The draft with a volatility forecast at `percentile` in its inputs, as the engine records it. */
const forecast = (d: VerdictDraft, percentile: number): VerdictDraft => ({
  ...d,
  inputs: {
    ...d.inputs,
    vol_expected_move_pct: 1,
    vol_band_low: 99_000,
    vol_band_high: 101_000,
    vol_horizon_candles: 6,
    vol_percentile: percentile,
  },
});

/** `riskShift`: verdict 1's forecast also enters the top decile (RiskShifted at 3, verdict 2 at 4). */
async function setup(now: number | (() => number), riskShift = false) {
  const store = new CountingStore();
  await recordVerdict(store, forecast(draft(0, 'ranging'), 50));
  await recordVerdict(store, forecast(draft(1, 'volatile'), riskShift ? 95 : 50)); // revision 1, RegimeShifted at 2
  await recordVerdict(store, forecast(draft(2, 'volatile'), riskShift ? 96 : 50)); // revision 3
  app = await buildApp({
    config: { BODY_LIMIT_BYTES: 1024 },
    logger: pino({ level: 'silent' }),
    readiness: new Readiness(),
    metrics: null,
    plugins: [
      verifyRoutes({
        store,
        baseUrl: 'https://signals.example/',
        now: typeof now === 'function' ? now : () => now,
      }),
    ],
  });
  return { store, stream: verdictStream(draft(0, 'ranging')) };
}

describe('GET /verify/:stream/:revision', () => {
  it('proves the recording without revealing a verdict whose outcome is still open', async () => {
    const { stream } = await setup(T0 + 3 * HOUR);
    const res = await app!.inject({ method: 'GET', url: `/verify/${stream}/3` });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      stream,
      revision: 3,
      coin: 'BTC',
      hashValid: true,
      content: null,
      previous: `https://signals.example/verify/${stream}/1`,
      revealAt: new Date(T0 + 8 * HOUR).toISOString(),
    });
    expect(res.headers['cache-control']).toBe('public, max-age=60');
  });

  it('reveals the content once the outcome is known, and it hashes to the recorded hash', async () => {
    const { stream } = await setup(T0 + 100 * HOUR);
    const body = (await app!.inject({ method: 'GET', url: `/verify/${stream}/1` })).json();
    expect(body.content).toMatchObject({ call: 'SELL', regime: 'volatile', price: 100_001 });
    expect(verdictHash(body.content)).toBe(body.hash);
    expect(body.previous).toBe(`https://signals.example/verify/${stream}/0`);
    const first = (await app!.inject({ method: 'GET', url: `/verify/${stream}/0` })).json();
    expect(first.previous).toBeNull();
    expect(body.prevHash).toBe(first.hash);
  });

  it('links the previous verdict across a regime and a risk shift recorded with one', async () => {
    const { stream } = await setup(T0 + 3 * HOUR, true);
    const types = (await app!.inject({ method: 'GET', url: `/verify/${stream}/4` })).json();
    expect(types).toMatchObject({ revision: 4, previous: `https://signals.example/verify/${stream}/1` });
    for (const shift of [2, 3]) {
      expect((await app!.inject({ method: 'GET', url: `/verify/${stream}/${shift}` })).statusCode).toBe(404);
    }
  });

  it('answers refs that are not verdicts with 404 and malformed refs with 400', async () => {
    const { stream } = await setup(T0);
    const shift = await app!.inject({ method: 'GET', url: `/verify/${stream}/2` });
    expect(shift.statusCode).toBe(404);
    expect(shift.json()).toEqual({ code: 'verdict_not_found', message: `no verdict at ${stream}/2` });
    expect((await app!.inject({ method: 'GET', url: `/verify/${stream}/99` })).statusCode).toBe(404);
    const bad = await app!.inject({ method: 'GET', url: '/verify/payment-0xabc/0' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ code: 'invalid_verdict_ref', message: 'not a verdict stream' });
    expect((await app!.inject({ method: 'GET', url: `/verify/${stream}/-1` })).statusCode).toBe(400);
    // Only decimal revisions: 0x10 is not revision 16, 1e1 is not 10, 01 is not 1.
    for (const revision of ['0x10', '1e1', '01', '1.0', '+1', ' 1', '0b1']) {
      const res = await app!.inject({
        method: 'GET',
        url: `/verify/${stream}/${encodeURIComponent(revision)}`,
      });
      expect(res.statusCode, revision).toBe(400);
      expect(res.json(), revision).toEqual({
        code: 'invalid_verdict_ref',
        message: 'revision must be a decimal integer',
      });
    }
  });

  it('computes a revealed answer once and serves it as immutable, revalidated by its ETag', async () => {
    const { store, stream } = await setup(T0 + 100 * HOUR);
    const first = await app!.inject({ method: 'GET', url: `/verify/${stream}/1` });
    expect(first.statusCode).toBe(200);
    expect(first.headers['cache-control']).toBe('public, max-age=86400, immutable');
    expect(first.headers['content-type']).toBe('application/json; charset=utf-8');
    const etag = first.headers.etag as string;
    expect(etag).toBe(`"${first.json().hash}"`);
    const readsAfterFirst = store.reads;
    for (let i = 0; i < 5; i++) {
      const again = await app!.inject({ method: 'GET', url: `/verify/${stream}/1` });
      expect(again.body).toBe(first.body);
    }
    expect(store.reads).toBe(readsAfterFirst);
    const notModified = await app!.inject({
      method: 'GET',
      url: `/verify/${stream}/1`,
      headers: { 'if-none-match': etag },
    });
    expect(notModified.statusCode).toBe(304);
    expect(notModified.body).toBe('');
  });

  it('turns a sealed answer into the revealed one at its reveal time, never serving stale content', async () => {
    let now = T0 + 3 * HOUR;
    const { stream } = await setup(() => now);
    const sealed = await app!.inject({ method: 'GET', url: `/verify/${stream}/3` });
    expect(sealed.json().content).toBeNull();
    // Reveal at T0 + 8 h: 20 s before it, no cache may hold the sealed answer past it.
    now = T0 + 8 * HOUR - 20_000;
    const soon = await app!.inject({ method: 'GET', url: `/verify/${stream}/3` });
    expect(soon.json().content).toBeNull();
    expect(soon.headers['cache-control']).toBe('public, max-age=20');
    now = T0 + 8 * HOUR;
    const revealed = await app!.inject({ method: 'GET', url: `/verify/${stream}/3` });
    expect(revealed.json().content).toMatchObject({ call: 'SELL', price: 100_002 });
    expect(revealed.headers.etag).not.toBe(sealed.headers.etag);
  });

  it('does not remember a verdict that is not recorded yet', async () => {
    const { store, stream } = await setup(T0 + 100 * HOUR);
    expect((await app!.inject({ method: 'GET', url: `/verify/${stream}/4` })).statusCode).toBe(404);
    await recordVerdict(store, draft(3, 'volatile')); // revision 4
    expect((await app!.inject({ method: 'GET', url: `/verify/${stream}/4` })).statusCode).toBe(200);
  });
});
