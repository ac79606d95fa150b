/**
 * A realistic log for the rebuild, start-up and growth benches: every event valid against the
 * catalog (so the projections do their real work rather than passing invalid events over), in a
 * mix like a service running the full schedule with keyed traffic:
 *   verdicts (real engine inputs) 35 %, their outcomes 30 %, regime shifts 2 %, quota debits
 *   25 %, webhook deliveries 5 %, payments 2 %, keys, subscriptions and chat quota 1 %.
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { EventStore } from '../adapters/event-store/port.ts';
import { readCandleFile } from '../adapters/market/csv.ts';
import type { NewEvent } from '../contracts/envelope.ts';
import { type EventData, type EventType, newEvent } from '../contracts/events.ts';
import { outcomeStream } from '../contracts/history.ts';
import { EXCHANGES, TIMEFRAMES } from '../contracts/market.ts';
import { verdictHash } from '../contracts/verdict-hash.ts';
import { defaultCalibration } from '../services/engine/signals/default-calibration.ts';
import { createMarketState } from '../services/engine/signals/market-state.ts';
import { computeVerdict } from '../services/engine/signals/verdict.ts';

export const MIX: [EventType | 'Delivery' | 'Payment' | 'Rare', number][] = [
  ['VerdictRecorded', 35],
  ['VerdictOutcomeResolved', 30],
  ['RegimeShifted', 2],
  ['QuotaDebitsRecorded', 25],
  ['Delivery', 5],
  ['Payment', 2],
  ['Rare', 1],
];

/** The inputs a real verdict records (indicator readings, volatility, calibration), from real candles. */
async function realInputs(): Promise<Record<string, number | string | boolean | null>> {
  const dir = join(import.meta.dirname, '..', 'sample-data', 'market', 'candles', 'binance-spot');
  const candles = await readCandleFile(join(dir, 'BTCUSDT-1h.csv.gz'));
  const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: '1h' });
  for (const candle of candles.slice(-400)) state.update(candle);
  const v = computeVerdict(state, undefined, defaultCalibration, { includeReasoning: false });
  const out: Record<string, number | string | boolean | null> = {};
  for (const [k, x] of Object.entries(v.indicators)) out[k] = x === null || Number.isFinite(x) ? x : null;
  out.perp_lean = v.perp_lean;
  out.calibrated_probability = v.calibration.probability;
  out.edge_cell = v.edge.cell;
  out.edge_measured = v.edge.measured;
  out.vol_horizon_candles = v.volatility.horizon_candles;
  out.vol_expected_move_pct = v.volatility.expected_move_pct;
  out.vol_band_low = v.volatility.band_low;
  out.vol_band_high = v.volatility.band_high;
  out.vol_band_coverage = v.volatility.band_coverage;
  out.vol_percentile = v.volatility.percentile;
  return out;
}

interface Pending {
  id: string;
  stream: string;
  revision: number;
  data: EventData<'VerdictRecorded'>;
}

/** Generates `[stream, event]` pairs of the mix, deterministic but for event ids. */
export async function eventMix(options: { markets?: number; keys?: number } = {}) {
  const markets = options.markets ?? 100;
  const keyCount = options.keys ?? 200;
  const inputs = await realInputs();
  const revisions = new Map<string, number>();
  const lastHash = new Map<string, string | null>();
  const pending: Pending[] = [];
  const wheel = MIX.flatMap(([kind, share]) => Array<(typeof MIX)[number][0]>(share).fill(kind));
  let n = 0;
  const day = '2026-11-23';
  const hex = (s: string) => createHash('sha256').update(s).digest('hex');
  const next = (stream: string) => {
    const r = (revisions.get(stream) ?? -1) + 1;
    revisions.set(stream, r);
    return r;
  };

  function verdict(): [string, NewEvent] {
    const m = n % markets;
    const exchange = EXCHANGES[m % 2]!;
    const coin = `C${Math.floor(m / 2)}`;
    const timeframe = TIMEFRAMES[n % TIMEFRAMES.length]!;
    const stream = `verdicts-${exchange}-${coin}-${timeframe}`;
    const x = Math.sin(n * 104_729);
    const content = {
      exchange,
      coin,
      timeframe,
      call: x > 0.2 ? ('BUY' as const) : x < -0.2 ? ('SELL' as const) : ('HOLD' as const),
      confidence: 40 + Math.floor(Math.abs(x) * 30),
      score: Number(x.toFixed(6)),
      regime: 'ranging' as const,
      price: 100 + 10 * x,
      candleCloseTime: 1_700_000_000_000 + n * 60_000,
      feed: 'replay' as const,
      engineVersion: 'bench-1',
      inputs: { ...inputs, rsi: 50 + 20 * x },
      prevHash: lastHash.get(stream) ?? null,
      trigger: 'schedule' as const,
    };
    const data = { ...content, hash: verdictHash(content) };
    lastHash.set(stream, data.hash);
    const id = randomUUID();
    pending.push({ id, stream, revision: next(stream), data });
    return [stream, newEvent('VerdictRecorded', data, { id })];
  }

  function outcome(): [string, NewEvent] {
    const v = pending.shift();
    if (!v) return verdict();
    const r = Math.sin(n) / 100;
    const stream = outcomeStream(v.id);
    next(stream);
    return [
      stream,
      newEvent('VerdictOutcomeResolved', {
        exchange: v.data.exchange,
        coin: v.data.coin,
        timeframe: v.data.timeframe,
        verdictId: v.id,
        verdictStream: v.stream,
        verdictRevision: v.revision,
        verdictHash: v.data.hash,
        call: v.data.call,
        confidence: v.data.confidence,
        candleCloseTime: v.data.candleCloseTime,
        feed: v.data.feed,
        price: v.data.price,
        return1: r / 3,
        return6: r,
        return24: r * 2,
        result: v.data.call === 'HOLD' ? 'no-call' : r > 0 ? 'hit' : 'miss',
        feeBps: 10,
        horizonCandles: 6,
        netCentiBps: Math.round(r * 1_000_000),
        maeBps: -20,
        mfeBps: 30,
        realisedVol: 0.004,
      }),
    ];
  }

  function one(): [string, NewEvent] {
    const kind = wheel[n % wheel.length]!;
    const key = `key_${n % keyCount}`;
    switch (kind) {
      case 'VerdictRecorded':
        return verdict();
      case 'VerdictOutcomeResolved':
        return outcome();
      case 'RegimeShifted': {
        const m = n % markets;
        const stream = `verdicts-${EXCHANGES[m % 2]}-C${Math.floor(m / 2)}-1h`;
        next(stream);
        return [
          stream,
          newEvent('RegimeShifted', {
            exchange: EXCHANGES[m % 2]!,
            coin: `C${Math.floor(m / 2)}`,
            timeframe: '1h',
            from: 'ranging',
            to: 'trending-up',
            confidence: 60,
            price: 101,
            candleCloseTime: 1_700_000_000_000 + n * 60_000,
            feed: 'replay',
            verdictEventId: randomUUID(),
          }),
        ];
      }
      case 'QuotaDebitsRecorded': {
        const stream = `quota-${key}`;
        next(stream);
        return [
          stream,
          // One call per event: keyed calls that never overlap, the mix's most bytes per call.
          newEvent('QuotaDebitsRecorded', {
            subject: key,
            subjectKind: 'key',
            plan: 'starter',
            tool: 'get_trade_call',
            units: 1,
            day,
            month: day.slice(0, 7),
          }),
        ];
      }
      case 'Delivery': {
        const sub = `sub_${n % 50}`;
        const deliveryId = hex(`d${n >> 1}`).slice(0, 32);
        const stream = `delivery-${deliveryId}`;
        next(stream);
        return n % 2 === 0
          ? [
              stream,
              newEvent('DeliveryAttempted', {
                deliveryId,
                subscriptionId: sub,
                attempt: 1,
                eventId: randomUUID(),
                webhookEvent: 'trade_call',
                url: 'https://hooks.example.com/signals',
                trigger: 'event',
              }),
            ]
          : [
              stream,
              newEvent('DeliverySucceeded', {
                deliveryId,
                subscriptionId: sub,
                attempt: 1,
                status: 200,
                latencyMs: 42,
                response: 'ok',
                sentAt: new Date(1_700_000_000_000 + n).toISOString(),
                queuedMs: 3,
              }),
            ];
      }
      case 'Payment': {
        const nonce = `0x${hex(`p${Math.floor(n / 3)}`)}`;
        const ref = { nonce, network: 'eip155:8453', asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' };
        const stream = `payment-${hex(nonce).slice(0, 40)}`;
        next(stream);
        const payer = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
        const step = Math.floor(n / 100) % 3;
        return step === 0
          ? [
              stream,
              newEvent('PaymentAuthorized', {
                ...ref,
                payer,
                payTo: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
                amount: '10000',
                resource: 'https://signals.example.com/x402/get_trade_call',
                x402Version: 2,
                validAfter: '0',
                validBefore: '9999999999',
                requestId: randomUUID(),
                tool: 'get_trade_call',
              }),
            ]
          : step === 1
            ? [
                stream,
                newEvent('PaymentSettlementPending', { ...ref, submittedAt: new Date(0).toISOString() }),
              ]
            : [
                stream,
                newEvent('PaymentSettled', { ...ref, payer, amount: '10000', txHash: `0x${hex(nonce)}` }),
              ];
      }
      default: {
        const k = Math.floor(n / 100) % keyCount;
        if (n % 3 === 0) {
          const stream = `apikey-key_${k}`;
          next(stream);
          return [
            stream,
            newEvent('ApiKeyIssued', {
              keyId: `key_${k}`,
              keyHash: hex(`key ${k} ${n}`),
              prefix: 'sk_live_ab',
              plan: 'starter',
              owner: `owner-${k}`,
              via: 'operator',
            }),
          ];
        }
        const stream = `chat-key_${k}`;
        next(stream);
        return [
          stream,
          newEvent('ChatQuotaConsumed', {
            subject: `key_${k}`,
            subjectKind: 'key',
            plan: 'starter',
            month: day.slice(0, 7),
            model: 'local',
            requestId: randomUUID(),
          }),
        ];
      }
    }
  }

  return {
    next(): [string, NewEvent] {
      const out = one();
      n++;
      return out;
    },
  };
}

/**
 * Appends `total` events of the mix; each chunk's appends are issued in one turn, so an LMDB
 * store commits (and flushes) them together.
 */
export async function appendEventMix(store: EventStore, total: number, chunk = 2_000): Promise<void> {
  const mix = await eventMix();
  for (let written = 0; written < total; written += chunk) {
    const size = Math.min(chunk, total - written);
    const batch = new Map<string, NewEvent[]>();
    for (let i = 0; i < size; i++) {
      const [stream, event] = mix.next();
      const list = batch.get(stream);
      if (list) list.push(event);
      else batch.set(stream, [event]);
    }
    await Promise.all([...batch].map(([stream, events]) => store.append(stream, events)));
  }
}
