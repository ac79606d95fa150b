import { describe, expect, it } from 'vitest';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData } from '../../contracts/events.ts';
import {
  FEE_BPS,
  HORIZON_CANDLES,
  REVEAL_AFTER_CANDLES,
  TrackRecordBrief,
  TrackRecordBriefPayload,
} from '../../contracts/history.ts';
import type { Candle } from '../../contracts/market.ts';
import { TradeCallData } from '../../contracts/webhooks.ts';
import { REVEAL_AFTER_CANDLES as VERIFY_REVEAL } from '../api/verify/plugin.ts';
import { defaultCalibration } from '../engine/signals/index.ts';
import { tradeCallEnvelope } from '../webhooks/payloads.ts';
import { decodeCursor, encodeCursor, tagMatches } from './cursor.ts';
import { resolveOutcome } from './outcome.ts';
import { HistoryQueryError, negotiateAnswer, parseTime } from './query.ts';
import { isoTime } from './rows.ts';
import {
  addPoint,
  currentTrackRecord,
  recordAsOf,
  type ScoredPoint,
  type TrackRecordState,
  trackRecord,
  trackRecordBrief,
} from './track-record.ts';

const HOUR = 3_600_000;
const T0 = Date.parse('2025-10-01T00:00:00Z');

function verdict(call: 'BUY' | 'SELL' | 'HOLD', price = 100): EventData<'VerdictRecorded'> {
  return {
    exchange: 'BINANCE',
    coin: 'BTC',
    timeframe: '1h',
    call,
    confidence: 55,
    score: 0.3,
    regime: 'ranging',
    price,
    candleCloseTime: T0,
    feed: 'replay',
    engineVersion: 'test',
    inputs: {},
    hash: 'a'.repeat(64),
    prevHash: null,
    trigger: 'schedule',
  };
}

/** 24 hourly candles after T0 whose closes follow `closes` (then flat), highs/lows ±1. */
function following(closes: number[]): Candle[] {
  return Array.from({ length: 24 }, (_, i) => {
    const close = closes[i] ?? closes.at(-1)!;
    return { openTime: T0 + i * HOUR, open: close, high: close + 1, low: close - 1, close, volume: 1 };
  });
}

const ref = {
  verdictId: '00000000-0000-4000-8000-000000000001',
  stream: 'verdicts-BINANCE-BTC-1h',
  revision: 0,
};

describe('outcome labels', () => {
  it('uses the methodology of docs/evaluation.md and the calibration table', () => {
    expect(HORIZON_CANDLES).toBe(defaultCalibration.horizonCandles);
    expect(FEE_BPS).toBe(defaultCalibration.feeBps);
    expect(VERIFY_REVEAL).toBe(REVEAL_AFTER_CANDLES);
  });

  it('labels a BUY that beat the fee over six candles a hit, with its net return and excursions', () => {
    const o = resolveOutcome(ref, verdict('BUY'), following([99, 98, 100, 101, 100.5, 100.2, 103]));
    expect(o.return1).toBeCloseTo(-0.01, 12);
    expect(o.return6).toBeCloseTo(0.002, 12);
    expect(o.return24).toBeCloseTo(0.03, 12);
    expect(o.result).toBe('hit');
    expect(o.netCentiBps).toBe(1_000); // 20 bps move − 10 bps fee
    expect(o.maeBps).toBeCloseTo(-300, 6); // low of 97 within the horizon
    expect(o.mfeBps).toBeCloseTo(200, 6); // high of 102
    expect(o.realisedVol).toBeGreaterThan(0);
    expect(o.verdictHash).toBe('a'.repeat(64));
  });

  it('labels a move inside the fee a miss both ways, and HOLD a no-call', () => {
    const closes = [100, 100, 100, 100, 100, 100.05];
    expect(resolveOutcome(ref, verdict('BUY'), following(closes)).result).toBe('miss');
    const sell = resolveOutcome(ref, verdict('SELL'), following(closes));
    expect(sell.result).toBe('miss');
    expect(sell.netCentiBps).toBe(-1_500);
    const hold = resolveOutcome(ref, verdict('HOLD'), following(closes));
    expect(hold).toMatchObject({ result: 'no-call', netCentiBps: null, maeBps: null, mfeBps: null });
  });

  it("names a HOLD's lean, what following it earned after the fee, and the risk forecast it served", () => {
    const table = defaultCalibration;
    const served = {
      ...verdict('HOLD'),
      engineVersion: table.engineVersion,
      inputs: {
        vol_horizon_candles: 6,
        vol_expected_move_pct: 1.5,
        vol_band_low: 98,
        vol_band_high: 102,
        vol_band_coverage: 0.8,
        vol_percentile: 40,
      },
    };
    const o = resolveOutcome(ref, served, following([100, 100, 100, 100, 100, 101]));
    // perp:1h follows or fades the score as its table says; the score 0.3 leans that way.
    const dir = table.cells['perp:1h']!.direction;
    expect(o.lean).toBe(dir === 1 ? 'BUY' : 'SELL');
    expect(o.leanNetCentiBps).toBe(Math.round((dir * 100 - 10) * 100)); // ±1 % over 6 candles, less the fee
    expect(o).toMatchObject({ result: 'no-call', netCentiBps: null });
    expect(o.volatility).toEqual({
      horizonCandles: 6,
      expectedMovePct: 1.5,
      bandLow: 98,
      bandHigh: 102,
      bandCoverage: 0.8,
    });
    // A score of exactly 0 leans nowhere; a verdict of another engine gets no lean restated.
    expect(resolveOutcome(ref, { ...served, score: 0 }, following([101])).lean).toBeNull();
    const other = resolveOutcome(ref, { ...served, engineVersion: 'signals-0' }, following([101]));
    expect(other).toMatchObject({ lean: null, leanNetCentiBps: null });
    // A verdict recorded without a risk forecast has none to be scored on.
    expect(resolveOutcome(ref, verdict('HOLD'), following([101])).volatility).toBeNull();
  });

  it('refuses candles that are not exactly the ones after the verdict', () => {
    const candles = following([100]);
    expect(() => resolveOutcome(ref, verdict('BUY'), candles.slice(1))).toThrow('need 24 candles');
    const shifted = candles.map((c) => ({ ...c, openTime: c.openTime + HOUR }));
    expect(() => resolveOutcome(ref, verdict('BUY'), shifted)).toThrow('candle 0 opens at');
  });
});

function point(p: Partial<ScoredPoint>): ScoredPoint {
  return {
    exchange: 'BINANCE',
    timeframe: '1h',
    call: 'BUY',
    confidence: 60,
    candleCloseTime: T0,
    return6: 0.01,
    result: 'hit',
    netCentiBps: 9_000,
    price: 100,
    return1: 0,
    return24: 0,
    feed: 'replay',
    ...p,
  };
}

describe('track record: the feed it is built from', () => {
  const at = (state: TrackRecordState) => trackRecord(state, 'all', T0 + HOUR);

  it('a record of replay verdicts says replay, in a field and in words, with its counts per line', () => {
    const state: TrackRecordState = {};
    addPoint(state, point({}), 1);
    addPoint(state, point({ call: 'HOLD', result: 'no-call', netCentiBps: null }), 2);
    const tr = at(state);
    expect(tr.feed).toBe('replay');
    expect(tr.feedNote).toMatch(/wholly from the replay feed/);
    expect(tr.feedNote).toMatch(/not a live track record/);
    expect(tr.overall.feeds).toEqual({ live: 0, replay: 2, replayLooped: 0 });
    expect(tr.lines[0]!.feeds).toEqual({ live: 0, replay: 2, replayLooped: 0 });
  });

  it('a mixed record gives both counts, per line and overall', () => {
    const state: TrackRecordState = {};
    addPoint(state, point({ feed: 'live' }), 1);
    addPoint(state, point({ feed: 'live', timeframe: '4h' }), 2);
    addPoint(state, point({ feed: 'replay' }), 3);
    const tr = at(state);
    expect(tr.feed).toBe('mixed');
    expect(tr.feedNote).toMatch(/partly from the replay feed/);
    expect(tr.overall.feeds).toEqual({ live: 2, replay: 1, replayLooped: 0 });
    expect(tr.lines.map((l) => [l.timeframe, l.feeds.live, l.feeds.replay])).toEqual([
      ['1h', 1, 1],
      ['4h', 1, 0],
    ]);
    const live: TrackRecordState = {};
    addPoint(live, point({ feed: 'live' }), 1);
    expect(at(live)).toMatchObject({ feed: 'live' });
    expect(at({})).toMatchObject({
      feed: 'none',
      overall: { feeds: { live: 0, replay: 0, replayLooped: 0 } },
    });
  });

  it("a looped lap's verdicts count in no figure, only apart as replayLooped", () => {
    const state: TrackRecordState = {};
    addPoint(state, point({}), 1);
    addPoint(state, point({ replayLap: 1, result: 'miss', netCentiBps: -11_000, return6: -0.01 }), 2);
    addPoint(state, point({ replayLap: 2, call: 'HOLD', result: 'no-call', netCentiBps: null }), 3);
    const tr = at(state);
    expect(tr.overall).toMatchObject({ calls: 1, holds: 0, hits: 1 });
    expect(tr.overall.risk.unscored).toBe(1);
    expect(tr.overall.feeds).toEqual({ live: 0, replay: 1, replayLooped: 2 });
    expect(tr.feed).toBe('replay');
    expect(tr.feedNote).toMatch(
      /2 resolved verdicts of the replay's looped laps .* are left out of every figure/,
    );
    // Folded to the looped outcomes all the same: the answer counts up to them.
    expect(tr.asOfPosition).toBe(3);
    const looped: TrackRecordState = {};
    addPoint(looped, point({ replayLap: 1 }), 1);
    expect(at(looped)).toMatchObject({ feed: 'none', overall: { calls: 0, holds: 0 } });
  });

  it('says which lines count nothing because every verdict of theirs resolved in a looped lap', () => {
    const state: TrackRecordState = {};
    addPoint(state, point({}), 1);
    addPoint(state, point({ timeframe: '1d', replayLap: 1 }), 2);
    addPoint(state, point({ timeframe: '8h', replayLap: 1 }), 3);
    addPoint(state, point({ timeframe: '4h', replayLap: 1 }), 4);
    addPoint(state, point({ timeframe: '4h' }), 5);
    const tr = at(state);
    expect(tr.lines.find((l) => l.timeframe === '1d')).toMatchObject({ calls: 0, holds: 0 });
    expect(tr.feedNote).toContain(
      "No verdict of BINANCE 1d, BINANCE 8h is counted: each one resolved came due in a looped lap (its outcome, 24 candles on, past the end of the replay's data)",
    );
    expect(at({}).feedNote).not.toContain('No verdict of');
  });

  it('says a line counts none in this window alone when longer windows count its earlier verdicts', () => {
    const now = T0 + 40 * 24 * HOUR;
    const state: TrackRecordState = {};
    // A 1d verdict counted a month ago, then only looped ones in the last week.
    addPoint(state, point({ timeframe: '1d' }), 1);
    addPoint(state, point({ timeframe: '1d', replayLap: 1, candleCloseTime: now - 3 * 24 * HOUR }), 2);
    const week = trackRecord(state, '7d', now);
    expect(week.lines.find((l) => l.timeframe === '1d')).toMatchObject({ calls: 0, holds: 0 });
    expect(week.feedNote).toContain('No verdict of BINANCE 1d is counted in this window');
    expect(week.feedNote).not.toContain('REPLAY_START');
    expect(trackRecord(state, 'all', now).feedNote).not.toContain('No verdict of');
  });

  it("a looped lap's outcomes do not move the time the record is as of", () => {
    const now = T0 + 30 * 24 * HOUR;
    const state: TrackRecordState = {};
    addPoint(state, point({}), 1);
    addPoint(state, point({ replayLap: 1, candleCloseTime: T0 + 2 * 24 * HOUR }), 2);
    // As of the counted outcome's due time (its close plus 24 candles), not the looped one's.
    const tr = currentTrackRecord(state, 'all', now);
    expect(tr.asOf).toBe(new Date(T0 + 24 * HOUR).toISOString());
    expect(tr.overall.feeds).toEqual({ live: 0, replay: 1, replayLooped: 1 });
    expect(tr.asOfPosition).toBe(2);
    // Counting none: as of now, as an empty record is.
    const looped: TrackRecordState = {};
    addPoint(looped, point({ replayLap: 1 }), 1);
    expect(recordAsOf(looped, now)).toBe(now);
    expect(currentTrackRecord(looped, 'all', now).asOf).toBe(new Date(now).toISOString());
  });
});

describe('track record', () => {
  const state: TrackRecordState = {};
  // Four calls and a HOLD: BUY hit (+1 %), BUY miss (−1 %), SELL hit (−2 %), SELL miss (+0.05 %).
  addPoint(state, point({}), 1);
  addPoint(state, point({ return6: -0.01, result: 'miss', netCentiBps: -11_000, confidence: 40 }), 2);
  addPoint(
    state,
    point({ call: 'SELL', return6: -0.02, result: 'hit', netCentiBps: 19_000, confidence: 45 }),
    3,
  );
  addPoint(
    state,
    point({ call: 'SELL', return6: 0.0005, result: 'miss', netCentiBps: -1_500, confidence: 52 }),
    4,
  );
  addPoint(state, point({ call: 'HOLD', return6: 0.03, result: 'no-call', netCentiBps: null }), 5);
  // An old call outside the 7-day window.
  addPoint(state, point({ candleCloseTime: T0 - 30 * 24 * HOUR, timeframe: '4h' }), 6);

  it('scores calls, baselines on the same points, Brier and buckets', () => {
    const tr = trackRecord(state, '7d', T0 + HOUR);
    // Folded to the latest outcome's log position, whatever the window shows.
    expect(tr.asOfPosition).toBe(6);
    const o = tr.overall;
    expect(o).toMatchObject({ calls: 4, holds: 1, buys: 2, sells: 2, hits: 2, holdShare: 0.2 });
    expect(o.following.hitRate).toBe(0.5);
    expect(o.following.meanNetBps).toBe((90 - 110 + 190 - 15) / 4);
    expect(o.following.interval!.low).toBeLessThan(0.5);
    expect(o.following.interval!.high).toBeGreaterThan(0.5);
    // Up beyond the fee on 1 point (+1 %), down beyond it on 2 (−1 %, −2 %).
    expect(o.alwaysBuy.hitRate).toBe(0.25);
    expect(o.alwaysSell.hitRate).toBe(0.5);
    expect(o.random.hitRate).toBe(0.375); // half BUY, half SELL
    const meanRet = (100 - 100 - 200 + 5) / 4;
    expect(o.alwaysBuy.meanNetBps).toBeCloseTo(meanRet - 10, 10);
    expect(o.alwaysSell.meanNetBps).toBeCloseTo(-meanRet - 10, 10);
    expect(o.random.meanNetBps).toBeCloseTo(-10, 10);
    const brier = ((0.6 - 1) ** 2 + 0.4 ** 2 + (0.45 - 1) ** 2 + 0.52 ** 2) / 4;
    expect(o.brier).toBeCloseTo(brier, 6);
    expect(o.baseRateBrier).toBe(0.25);
    const b = Object.fromEntries(
      o.buckets.filter((x) => x.calls > 0).map((x) => [x.bucket, [x.calls, x.hits]]),
    );
    expect(b).toEqual({ '40-49': [2, 1], '50-59': [1, 0], '60-69': [1, 1] });
    expect(tr.lines.map((l) => l.timeframe)).toEqual(['1h']);
    expect(trackRecord(state, 'all', T0 + HOUR).lines.map((l) => l.timeframe)).toEqual(['1h', '4h']);
    expect(tr.series.at(-1)).toMatchObject({ calls: 4, hitRate: 0.5, cumNetBps: 155 });
  });

  it('scores the risk forecast every resolved verdict served: coverage and σ served ÷ realised', () => {
    const forecast = { horizonCandles: 6, expectedMovePct: 1, bandLow: 99, bandHigh: 101, bandCoverage: 0.8 };
    const risk: TrackRecordState = {};
    // Inside the band (+0.5 %), outside it (−2 %), a HOLD inside (+0.9 %), all with σ = 1 %.
    addPoint(risk, point({ return6: 0.005, volatility: forecast }), 7);
    addPoint(risk, point({ return6: -0.02, result: 'miss', volatility: forecast }), 8);
    addPoint(
      risk,
      point({ call: 'HOLD', return6: 0.009, result: 'no-call', netCentiBps: null, volatility: forecast }),
      9,
    );
    // No forecast recorded, and one over a horizon no outcome labels: counted, not scored.
    addPoint(risk, point({ call: 'HOLD', result: 'no-call', netCentiBps: null, volatility: null }), 10);
    addPoint(risk, point({ return6: 0.5, volatility: { ...forecast, horizonCandles: 3 } }), 11);
    // The next candle's forecast is scored on the next candle's return.
    addPoint(risk, point({ return1: 0.02, return6: 0, volatility: { ...forecast, horizonCandles: 1 } }), 12);
    const r = trackRecord(risk, '7d', T0 + HOUR).overall.risk;
    expect(r).toMatchObject({ points: 4, covered: 2, coverage: 0.5, nominalCoverage: 0.8, unscored: 2 });
    const realised = [0.005, -0.02, 0.009, 0.02].map((x) => Math.log1p(x) ** 2);
    const rms = Math.sqrt(realised.reduce((a, b) => a + b, 0) / 4);
    expect(r.sigmaRatio).toBeCloseTo(0.01 / rms, 4);
    expect(trackRecord(risk, '7d', T0 + HOUR).series.at(-1)).toMatchObject({ riskPoints: 4, coverage: 0.5 });
  });

  it('gives the risk figures a day-block interval, as the evaluation does, once the points span 20 blocks', () => {
    const DAY = 24 * HOUR;
    const forecast = {
      horizonCandles: 6,
      expectedMovePct: 1,
      bandLow: 98.7,
      bandHigh: 101.3,
      bandCoverage: 0.8,
    };
    // σ served 1 % at every close; a day's six 1h closes move ±0.5 % (calm) or ±2 % (a trending
    // day, every third): over many days σ served ÷ realised is about 1, a single day says 2 or 0.5.
    const fill = (state: TrackRecordState, days: number, timeframe: '1h' | '4h', from = 0) => {
      for (let d = from; d < from + days; d++) {
        const move = d % 3 === 2 ? 0.02 : 0.005;
        for (let k = 0; k < 6; k++) {
          const r = k % 2 === 0 ? move : -move;
          addPoint(
            state,
            point({ timeframe, candleCloseTime: T0 + d * DAY + k * HOUR, return6: r, volatility: forecast }),
            d * 6 + k + 1,
          );
        }
      }
    };
    // One trending day alone: its figure, and no interval: a day cannot tell a bias from that day's moves.
    const oneDay: TrackRecordState = {};
    fill(oneDay, 1, '1h', 2);
    const first = trackRecord(oneDay, 'all', T0 + 3 * DAY).overall.risk;
    expect(first).toMatchObject({ points: 6, blocks: 1, sigmaRatioInterval: null, coverageInterval: null });
    expect(first.sigmaRatio).toBeCloseTo(0.5, 2);
    // 19 days: still no interval; 30 days of 1h closes: 30 one-day blocks, an interval around the figure.
    const short: TrackRecordState = {};
    fill(short, 19, '1h');
    expect(trackRecord(short, 'all', T0 + 19 * DAY).overall.risk).toMatchObject({
      blocks: 19,
      sigmaRatioInterval: null,
    });
    const month: TrackRecordState = {};
    fill(month, 30, '1h');
    const tr = trackRecord(month, 'all', T0 + 30 * DAY);
    const r = tr.overall.risk;
    expect(r.blocks).toBe(30);
    expect(r.sigmaRatioInterval!.low).toBeLessThan(r.sigmaRatio!);
    expect(r.sigmaRatioInterval!.high).toBeGreaterThan(r.sigmaRatio!);
    expect(r.coverageInterval!.low).toBeLessThan(r.coverage!);
    expect(r.coverageInterval!.high).toBeGreaterThan(r.coverage!);
    // A trending day's figure lies outside the month's interval, the month's figure inside it.
    expect(first.sigmaRatio!).toBeLessThan(r.sigmaRatioInterval!.low);
    // Seeded: the same record, folded again, gives the same interval to the last digit.
    const again: TrackRecordState = {};
    fill(again, 30, '1h');
    expect(trackRecord(again, 'all', T0 + 30 * DAY).overall.risk).toEqual(r);
    expect(tr.lines[0]!.risk).toEqual(r);
    // On 4h a block is two days (two six-candle horizons): 30 days are 15 blocks, no interval; the
    // overall record pooling 1h and 4h resamples in the longer blocks too.
    const both: TrackRecordState = {};
    fill(both, 30, '1h');
    fill(both, 30, '4h');
    const mixed = trackRecord(both, 'all', T0 + 30 * DAY);
    expect(mixed.lines.map((l) => [l.timeframe, l.risk.blocks, l.risk.sigmaRatioInterval === null])).toEqual([
      ['1h', 30, false],
      ['4h', 15, true],
    ]);
    expect(mixed.overall.risk).toMatchObject({
      blocks: 15,
      sigmaRatioInterval: null,
      coverageInterval: null,
    });
  });

  it('says nothing it has not measured: a window with no resolved verdict, verdicts without a forecast', () => {
    const empty = trackRecord({}, '7d', T0);
    expect(empty.asOfPosition).toBe(0);
    expect(empty.overall.risk).toEqual({
      points: 0,
      covered: 0,
      coverage: null,
      nominalCoverage: null,
      sigmaRatio: null,
      blocks: 0,
      sigmaRatioInterval: null,
      coverageInterval: null,
      unscored: 0,
    });
    expect(empty.series).toEqual([]);
    expect(empty.overall.following.hitRate).toBeNull();
    // A window past every verdict: as empty as no history at all.
    expect(trackRecord(state, '7d', T0 + 30 * 24 * HOUR).overall).toEqual(empty.overall);
    const unscored = trackRecord(state, '7d', T0 + HOUR);
    expect(unscored.overall.risk).toMatchObject({ points: 0, coverage: null, sigmaRatio: null, unscored: 5 });
    expect(unscored.series.at(-1)).toMatchObject({ riskPoints: 0, coverage: null, sigmaRatio: null });
    // Carry: what is shipped, and that no live record exists.
    expect(empty.carry.recorded).toBe(false);
    expect(empty.carry.buckets.length).toBeGreaterThan(0);
  });

  it('gives a trade call the line of its own exchange, timeframe and confidence bucket', () => {
    const brief = TrackRecordBrief.parse(
      trackRecordBrief(state, { exchange: 'BINANCE', timeframe: '1h', confidence: 47 }, T0 + HOUR),
    );
    expect(brief).toMatchObject({
      confidenceBucket: '40-49',
      calls: 2,
      hits: 1,
      hitRate: 0.5,
      randomHitRate: 0.375,
      // Built from replayed verdicts, and says so as the full record does.
      feed: 'replay',
    });
    expect(brief.holds).toBe(1);
    expect(brief.note).toBeUndefined();
    const none = trackRecordBrief(state, { exchange: 'OKX', timeframe: '1h', confidence: 47 }, T0);
    expect(none).toMatchObject({ calls: 0, hitRate: null, interval: null, feed: 'none', holds: 0 });
    expect(none.note).toBe(
      'No verdict of OKX 1h resolved in the 90d window: a verdict resolves 24 candles after its candle closes.',
    );
  });

  it('says why a brief counts no call: HOLDs resolved, or calls in other buckets', () => {
    const holds: TrackRecordState = {};
    for (let i = 1; i <= 279; i++) {
      addPoint(holds, point({ call: 'HOLD', result: 'no-call', netCentiBps: null, confidence: 54 }), i);
    }
    const onlyHolds = TrackRecordBrief.parse(
      trackRecordBrief(holds, { exchange: 'BINANCE', timeframe: '1h', confidence: 54 }, T0 + HOUR),
    );
    expect(onlyHolds).toMatchObject({
      calls: 0,
      hitRate: null,
      randomHitRate: null,
      feed: 'replay',
      holds: 279,
    });
    expect(onlyHolds.note).toBe(
      'No BUY or SELL call of BINANCE 1h resolved in the 90d window: its 279 resolved verdicts were all HOLDs (no call, counted in no hit rate).',
    );
    // Calls of the market in other buckets: said, with its HOLDs beside them.
    const other = trackRecordBrief(
      state,
      { exchange: 'BINANCE', timeframe: '1h', confidence: 95 },
      T0 + HOUR,
    );
    expect(other).toMatchObject({ calls: 0, holds: 1 });
    expect(other.note).toBe(
      'No call of BINANCE 1h at confidence 90-100 resolved in the 90d window: its 4 resolved calls fell in other confidence buckets, beside 1 HOLD (no call, counted in no hit rate).',
    );
    // Every one of a market's verdicts in a looped lap: counted in no figure, and said so.
    const looped: TrackRecordState = {};
    addPoint(looped, point({ replayLap: 1 }), 1);
    const lap = trackRecordBrief(
      looped,
      { exchange: 'BINANCE', timeframe: '1h', confidence: 60 },
      T0 + HOUR,
      'all',
    );
    expect(lap.note).toBe(
      'No verdict of BINANCE 1h is counted in the record: its one resolved verdict came due in a looped replay lap, which no figure counts.',
    );
    // HOLDs or calls beside verdicts of a looped lap (a BUY among them): the lap's are not said
    // to be HOLDs, nor to be in other buckets, and are named apart.
    addPoint(holds, point({ replayLap: 1, confidence: 54 }), 280);
    addPoint(holds, point({ replayLap: 2, confidence: 54 }), 281);
    expect(
      trackRecordBrief(holds, { exchange: 'BINANCE', timeframe: '1h', confidence: 54 }, T0 + HOUR).note,
    ).toBe(
      'No BUY or SELL call of BINANCE 1h is counted in the 90d window: its 279 resolved verdicts outside looped replay laps were all HOLDs (no call, counted in no hit rate), and 2 verdicts came due in a looped replay lap, which no figure counts.',
    );
    const lapped = structuredClone(state);
    addPoint(lapped, point({ replayLap: 1, confidence: 95 }), 9);
    expect(
      trackRecordBrief(lapped, { exchange: 'BINANCE', timeframe: '1h', confidence: 95 }, T0 + HOUR).note,
    ).toBe(
      'No call of BINANCE 1h at confidence 90-100 is counted in the 90d window: its 4 resolved calls outside looped replay laps fell in other confidence buckets, beside 1 HOLD (no call, counted in no hit rate), and 1 verdict came due in a looped replay lap, which no figure counts.',
    );
  });

  it('rides along on trade_call webhooks when the history slice supplies it', () => {
    const brief = trackRecordBrief(
      state,
      { exchange: 'BINANCE', timeframe: '1h', confidence: 55 },
      T0 + HOUR,
    );
    const input = {
      deliveryId: 'd',
      createdAt: new Date(T0).toISOString(),
      verdict: verdict('BUY'),
      verifyUrl: 'https://x.test/verify/a/0',
    };
    const withLine = tradeCallEnvelope({ ...input, trackRecord: brief });
    expect(TradeCallData.parse(withLine.data)).toMatchObject({
      track_record: { confidenceBucket: '50-59', calls: 1 },
    });
    // The payload's published versions pin the line's shape (closed to other keys): the brief's
    // holds and note stay on the trade call and out of the payload.
    const carried = (data: unknown) => (data as { track_record: Record<string, unknown> }).track_record;
    expect(Object.keys(carried(withLine.data)).sort()).toEqual(
      Object.keys(TrackRecordBriefPayload.shape).sort(),
    );
    const noCall = trackRecordBrief(state, { exchange: 'OKX', timeframe: '1h', confidence: 55 }, T0);
    expect(noCall.note).toBeDefined();
    const payload = carried(tradeCallEnvelope({ ...input, trackRecord: noCall }).data);
    expect('holds' in payload || 'note' in payload).toBe(false);
    expect('track_record' in tradeCallEnvelope(input).data).toBe(false);
  });
});

describe('cursor and query', () => {
  it('round-trips a cursor and checks its event tag', () => {
    const id = '709b33d0-4040-56e4-82db-e359102d6a31';
    const cursor = decodeCursor(encodeCursor(42, id))!;
    expect(cursor.position).toBe(42);
    expect(tagMatches(cursor, id)).toBe(true);
    expect(tagMatches(cursor, '709b33d0-4040-56e4-82db-e359102d6a32')).toBe(false);
    expect(decodeCursor(encodeCursor(0, null))).toEqual({ position: 0, tag: '', tagAt: 'end' });
    // Two time-ordered ids of one millisecond share their first 12 digits: the tag is the last.
    const [a, b] = [newEventId(), newEventId()];
    const ofA = decodeCursor(encodeCursor(7, a))!;
    expect(tagMatches(ofA, a)).toBe(true);
    expect(tagMatches(ofA, b)).toBe(false);
    // A cursor issued before (h1: the id's first 12 digits) still resumes where it did.
    const older = decodeCursor(Buffer.from('h1:42:709b33d04040').toString('base64url'))!;
    expect(older).toEqual({ position: 42, tag: '709b33d04040', tagAt: 'start' });
    expect(tagMatches(older, id)).toBe(true);
    expect(tagMatches(older, '809b33d0-4040-56e4-82db-e359102d6a31')).toBe(false);
    for (const bad of [
      '',
      'abc',
      Buffer.from('h1:5:').toString('base64url'),
      Buffer.from('h2:5:').toString('base64url'),
      Buffer.from('h3:5:0123456789ab').toString('base64url'),
      'a'.repeat(100),
      // Not as issued: a leading zero, and the spare low bits of the last character set (the
      // issued text ends in ...NGE; ...NGF decodes to the same bytes).
      Buffer.from('h2:05:7b0e5aa9fa4a').toString('base64url'),
      'aDI6Mjo3YjBlNWFhOWZhNGF',
    ]) {
      expect(decodeCursor(bad), bad).toBeNull();
    }
  });

  it('negotiates the format from format= or Accept', () => {
    const format = (f: string | undefined, accept: string | undefined) =>
      negotiateAnswer(f, undefined, accept).format;
    expect(format(undefined, undefined)).toBe('ndjson');
    expect(format(undefined, '*/*')).toBe('ndjson');
    expect(format(undefined, 'text/csv')).toBe('csv');
    expect(format(undefined, 'application/json;q=0.5, application/vnd.apache.parquet')).toBe('parquet');
    expect(format(undefined, 'text/html, text/csv;q=0.9')).toBe('csv');
    expect(format(undefined, 'text/*')).toBe('csv');
    expect(format(undefined, 'text/html, text/*;q=0.5')).toBe('csv');
    expect(format('parquet', 'text/csv')).toBe('parquet');
    // q=0 refuses a format (RFC 9110): a wildcard beside it takes the next one it covers.
    expect(format(undefined, 'application/x-ndjson;q=0, */*')).toBe('csv');
    expect(format(undefined, 'application/x-ndjson;q=0, application/*')).toBe('parquet');
    expect(() => format(undefined, 'text/csv;q=0, text/*')).toThrow(HistoryQueryError);
    // The most specific range decides: a wider q=0 leaves a narrower range its format.
    expect(format(undefined, 'text/*;q=0, text/csv')).toBe('csv');
    expect(format(undefined, 'application/*;q=0, */*')).toBe('csv');
    // ... and its q, not only q=0: a wider range's higher q asks nothing for a format named lower.
    expect(format(undefined, '*/*, application/x-ndjson;q=0.1')).toBe('csv');
    expect(format(undefined, 'text/*, text/csv;q=0.1, application/x-ndjson;q=0.5')).toBe('ndjson');
    expect(() => format(undefined, 'text/html')).toThrow(HistoryQueryError);
    expect(() => format('json', undefined)).toThrow('format must be one of');
  });

  it('reads the trailer profile on the Accept range the answer is served as, not on the others', () => {
    const refused = (f: string | undefined, trailer: boolean | undefined, accept: string | undefined) => {
      try {
        negotiateAnswer(f, trailer, accept);
        return null;
      } catch (err) {
        return (err as HistoryQueryError).field;
      }
    };
    // Asked of CSV: refused, naming where it was asked.
    expect(refused(undefined, undefined, 'text/csv; profile="trailer"')).toBe('accept');
    expect(refused(undefined, true, 'text/csv')).toBe('trailer');
    expect(negotiateAnswer(undefined, undefined, 'application/x-ndjson; profile="trailer"')).toEqual({
      format: 'ndjson',
      trailer: true,
    });
    // Served as CSV: the profile sits on the NDJSON range, which was not chosen.
    expect(
      negotiateAnswer(undefined, undefined, 'text/csv, application/x-ndjson; profile="trailer"'),
    ).toMatchObject({
      format: 'csv',
    });
    expect(
      negotiateAnswer(undefined, undefined, 'text/csv;q=0.5, application/x-ndjson; profile="trailer"'),
    ).toEqual({ format: 'ndjson', trailer: true });
    // format= wins over Accept, and trailer= over the profile.
    expect(negotiateAnswer('csv', undefined, 'text/csv; profile="trailer"')).toMatchObject({ format: 'csv' });
    expect(negotiateAnswer('ndjson', undefined, 'application/x-ndjson; profile="trailer"')).toEqual({
      format: 'ndjson',
      trailer: true,
    });
    expect(negotiateAnswer(undefined, false, 'application/x-ndjson; profile="trailer"')).toEqual({
      format: 'ndjson',
      trailer: false,
    });
    // The profile on a range given q=0 is refused with it, not asked for.
    expect(
      negotiateAnswer(
        undefined,
        undefined,
        'application/x-ndjson; profile="trailer"; q=0, application/x-ndjson',
      ),
    ).toEqual({ format: 'ndjson', trailer: false });
    expect(negotiateAnswer(undefined, undefined, 'text/csv')).toEqual({ format: 'csv', trailer: false });
    expect(negotiateAnswer(undefined, undefined, undefined)).toEqual({ format: 'ndjson', trailer: false });
  });

  it('reads times as ISO 8601 with a zone or Unix ms', () => {
    expect(parseTime('from', '2025-10-01T00:00:00Z')).toBe(T0);
    expect(parseTime('from', '2025-10-01')).toBe(T0);
    expect(parseTime('from', String(T0))).toBe(T0);
    for (const bad of ['2025-10-01T00:00:00', 'yesterday', '-5', '2025-02-30T00:00:00Z']) {
      expect(() => parseTime('from', bad), bad).toThrow(HistoryQueryError);
    }
    // The refusal names every form accepted: a date alone is one (read as midnight UTC), a time
    // of day without a zone is not.
    expect(() => parseTime('from', '2025-10-01T00:00:00')).toThrow(
      'from must be Unix milliseconds, a date (2025-06-01, read as 00:00 UTC) or an ISO 8601 time with a zone',
    );
    // Unix seconds read as milliseconds are January 1970: refused with the milliseconds meant,
    // rather than a from= that passes everything or a to= that passes nothing.
    expect(() => parseTime('to', String(T0 / 1000))).toThrow(
      `to ${T0 / 1000} reads as 1970-01-21T08:41:16.800Z in Unix milliseconds: Unix seconds? Give milliseconds (${T0}) or an ISO 8601 time (2025-10-01T00:00:00.000Z)`,
    );
    expect(() => parseTime('from', '100000000')).toThrow(HistoryQueryError);
    // 0 and the milliseconds of a real time stay as they are.
    expect(parseTime('from', '0')).toBe(0);
    expect(parseTime('from', '99999999')).toBe(99_999_999);
    expect(parseTime('from', '100000000000')).toBe(1e11);
  });
});

describe('isoTime', () => {
  it('formats every time as Date#toISOString does, across days, epochs and sign', () => {
    const times = [0, -1, 1, 999, 86_399_999, 86_400_000, -86_400_001, 951_782_400_000, 253_402_300_799_999];
    // A deterministic spread over ±1970..2096, out of order so the per-day cache is crossed.
    for (let i = 0; i < 20_000; i++) times.push(Math.round(Math.sin(i * 12.9898) * 4e12) + (i % 1_000));
    for (const ms of times) expect(isoTime(ms), String(ms)).toBe(new Date(ms).toISOString());
  });
});
