import { beforeAll, describe, expect, it } from 'vitest';
import { closedCandles } from '../../../adapters/market/candle-window.ts';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';
import { type CalibrationTable, VerdictSchema } from '../../../contracts/signals.ts';
import { callDirection } from './calibration.ts';
import { defaultCalibration } from './default-calibration.ts';
import { InsufficientHistoryError } from './errors.ts';
import { computeRegime } from './market-regime.ts';
import { createMarketState } from './market-state.ts';
import {
  callFor,
  computeScore,
  computeVerdict,
  ENGINE_VERSION,
  recordedMeaning,
  recordedReasoning,
} from './verdict.ts';

const FILE = new URL('../../../sample-data/market/candles/binance-spot/BTCUSDT-1h.csv.gz', import.meta.url)
  .pathname;
const HOUR = 3_600_000;
let candles: Candle[];
beforeAll(async () => {
  candles = await readCandleFile(FILE);
});

function stateFrom(cs: readonly Candle[]) {
  const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: '1h' });
  for (const c of cs) state.update(c);
  return state;
}

const FLAT = { samples: 1000, baseRate: 0.5, bins: [{ upTo: 1, probability: 0.5, samples: 1000 }] };

/** The shipped table with spot:1h made an emitting cell (the shipped one holds: no measured edge). */
function emitting(
  direction: 1 | -1 = callDirection(defaultCalibration, '1h'),
  curve: CalibrationTable['curves']['1h'] = defaultCalibration.cells['spot:1h']?.curve ?? FLAT,
): CalibrationTable {
  return {
    ...defaultCalibration,
    cells: { ...defaultCalibration.cells, 'spot:1h': { emit: true, direction, curve: curve!, evidence: [] } },
  };
}

/** What a feed does: at time `now`, only candles closed by then reach the state. */
function verdictAt(cs: readonly Candle[], now: number) {
  return computeVerdict(stateFrom(closedCandles(cs, '1h', now, cs.length)), undefined, defaultCalibration);
}

describe('composite verdict on real candles', () => {
  it('produces contract-valid verdicts at every stable candle', () => {
    const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: '1h' });
    const calls = new Set<string>();
    let checked = 0;
    const table = emitting();
    for (const c of candles) {
      state.update(c);
      if (state.missingForVerdict().length > 0) continue;
      const v = computeVerdict(state, undefined, table);
      VerdictSchema.parse(v);
      expect(v.candle_close_time).toBe(c.openTime + HOUR);
      expect(v.price).toBe(c.close);
      const direction = callDirection(defaultCalibration, '1h');
      expect(v.stance).toBe(direction === 1 ? 'follow' : 'fade');
      expect(v.call).toBe(callFor(direction * v.score, defaultCalibration.holdBand));
      expect(v.edge).toMatchObject({ cell: 'spot:1h', measured: true });
      expect(v.regime).toBe(computeRegime(state).regime);
      expect(v.volatility.band_low).toBeLessThan(v.price);
      expect(v.volatility.band_high).toBeGreaterThan(v.price);
      expect(v.volatility.expected_move_pct).toBeGreaterThan(0);
      calls.add(v.call);
      checked++;
    }
    expect(checked).toBeGreaterThan(800);
    expect(calls).toEqual(new Set(['BUY', 'SELL', 'HOLD']));
  });

  it('HOLD band: |score| below the band is HOLD, at or above it a direction', () => {
    expect(callFor(0.0999, 0.1)).toBe('HOLD');
    expect(callFor(-0.0999, 0.1)).toBe('HOLD');
    expect(callFor(0.1, 0.1)).toBe('BUY');
    expect(callFor(-0.1, 0.1)).toBe('SELL');
    expect(callFor(0, 0)).toBe('HOLD');
    const state = stateFrom(candles.slice(0, 400));
    const { score } = computeScore(state);
    const table = emitting();
    const wide = computeVerdict(state, undefined, table, { holdBand: Math.abs(score) + 0.01 });
    expect(wide.call).toBe('HOLD');
    const narrow = computeVerdict(state, undefined, table, { holdBand: 0 });
    const leansUp = callDirection(defaultCalibration, '1h') * score >= 0;
    expect(narrow.call).toBe(leansUp ? 'BUY' : 'SELL');
    expect(wide.confidence).toBe(100 - narrow.confidence);
  });

  it('confidence comes from the calibration table, not from |score|', () => {
    const state = stateFrom(candles.slice(0, 400));
    const flat = emitting(1, {
      samples: 1000,
      baseRate: 0.42,
      bins: [{ upTo: 1, probability: 0.42, samples: 1000 }],
    });
    const v = computeVerdict(state, undefined, flat, { holdBand: 0 });
    expect(v.confidence).toBe(42);
    expect(v.calibration).toEqual({ timeframe: '1h', probability: 0.42 });
  });

  it('a table that fades the score turns the call around and says so; confidence is unchanged', () => {
    const state = stateFrom(candles.slice(0, 400));
    const { score } = computeScore(state);
    expect(Math.abs(score)).toBeGreaterThan(0);
    const curve = { samples: 1000, baseRate: 0.53, bins: [{ upTo: 1, probability: 0.53, samples: 1000 }] };
    const follow = emitting(1, curve);
    const fade = emitting(-1, { ...curve, direction: -1 });
    const a = computeVerdict(state, undefined, follow, { holdBand: 0 });
    const b = computeVerdict(state, undefined, fade, { holdBand: 0 });
    expect(a.call).toBe(score > 0 ? 'BUY' : 'SELL');
    expect(b.call).toBe(score > 0 ? 'SELL' : 'BUY');
    expect(a.stance).toBe('follow');
    expect(b.stance).toBe('fade');
    expect([a.confidence, b.confidence]).toEqual([53, 53]);
    expect(b.score).toBe(a.score);
    expect(b.reasoning).toContain('fading');
    expect(a.reasoning).not.toContain('fading');
    // Inside the HOLD band the stance does not matter: both say HOLD.
    const wide = { holdBand: Math.abs(score) + 0.01 };
    expect(computeVerdict(state, undefined, fade, wide).call).toBe('HOLD');
    expect(computeVerdict(state, undefined, follow, wide).call).toBe('HOLD');
  });

  it('quotes the band in its reasoning with every digit the fields have, past a power of ten too', () => {
    // The candles scaled so the last close sits just under 100: the band's upper edge is past it,
    // with one significant digit more than the price (100.0123 beside 99.9512).
    const slice = candles.slice(0, 400);
    const k = 99.95 / slice.at(-1)!.close;
    const scaled = slice.map((c) => ({
      ...c,
      open: c.open * k,
      high: c.high * k,
      low: c.low * k,
      close: c.close * k,
    }));
    const v = computeVerdict(stateFrom(scaled), undefined, defaultCalibration);
    expect(v.volatility!.band_high).toBeGreaterThan(100);
    const band = /80% band ([\d.]*\d)–([\d.]*\d)/.exec(v.reasoning);
    expect(band, v.reasoning).not.toBeNull();
    expect([Number(band![1]), Number(band![2])]).toEqual([v.volatility!.band_low, v.volatility!.band_high]);
  });

  it('answers HOLD with "no measured edge here" in a cell without walk-forward evidence', () => {
    const state = stateFrom(candles.slice(0, 400));
    const table: CalibrationTable = {
      ...defaultCalibration,
      cells: { 'spot:1h': { emit: false, direction: -1, curve: FLAT, evidence: ['fold: fail'] } },
    };
    const v = computeVerdict(state, undefined, table, { holdBand: 0 });
    expect(v.call).toBe('HOLD');
    expect(v.edge).toMatchObject({ cell: 'spot:1h', measured: false });
    expect(v.edge.reason).toContain('no measured edge here');
    expect(v.reasoning).toContain('no measured edge here');
    // The expected move is one σ of the log return, not a range the close stays in: the band beside it is that.
    expect(v.reasoning).toContain(
      `Expected move over 6 candles ±${v.volatility.expected_move_pct.toFixed(2)}% (one σ of the log return; forecast rank`,
    );
    // A cell the evaluation never measured (here the perpetual on 1h, absent from the table) holds too.
    const perp = createMarketState({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' });
    for (const c of candles.slice(0, 400)) perp.update(c);
    const p = computeVerdict(perp, undefined, { ...defaultCalibration, cells: {} }, { holdBand: 0 });
    expect(p.call).toBe('HOLD');
    expect(p.edge.reason).toContain('no measured edge here');
  });

  it('holds where timing skill does not pay, naming the lean, its net and what the confidence means', () => {
    const state = stateFrom(candles.slice(0, 400));
    const { score } = computeScore(state);
    expect(score).not.toBe(0);
    const skilledUnpaid: CalibrationTable = {
      ...defaultCalibration,
      cells: {
        'spot:1h': {
          emit: false,
          direction: -1,
          curve: FLAT,
          evidence: ['fold: pass, does not pay'],
          timingSkill: true,
          net: { meanBps: -9.6, lowBps: -10.4, calls: 5000 },
          hold: { probability: 0.573, samples: 5000 },
        },
      },
    };
    const v = computeVerdict(state, undefined, skilledUnpaid, { holdBand: 0 });
    VerdictSchema.parse(v);
    expect(v.call).toBe('HOLD');
    // HOLD's number is the measured share of leans that did not beat the fee, not 100 − a call's.
    expect(v.confidence).toBe(57);
    // Its interval (−10.4 to −8.8) lies below 0: a measured loss, served as a figure.
    expect(v.lean).toEqual({
      direction: score > 0 ? 'SELL' : 'BUY',
      timing_skill: true,
      measurable: true,
      expected_net_bps: -9.6,
      expected_net_bps_low: -10.4,
      expected_net_bps_high: expect.closeTo(-8.8, 9),
    });
    expect(v.edge.reason).toContain('no profit after the fee');
    expect(v.edge.reason).toContain('lost 9.6 bps per call (90 % interval −10.4 to −8.8 bps)');
    expect(v.confidence_meaning).toContain('57 = how often standing aside was right');
    expect(v.confidence_meaning).toContain('5000 leans');
    expect(v.reasoning).toContain(`leans ${v.lean!.direction}; following such leans lost 9.6 bps per call`);
    // Spot 12h's evidence (+4.43 bps, bound −100.92): no figure, the interval, and words that say so.
    const wide: CalibrationTable = {
      ...skilledUnpaid,
      cells: {
        'spot:1h': {
          ...skilledUnpaid.cells['spot:1h']!,
          timingSkill: false,
          net: { meanBps: 4.43, lowBps: -100.92, calls: 1131 },
        },
      },
    };
    const w = computeVerdict(state, undefined, wide, { holdBand: 0 });
    VerdictSchema.parse(w);
    expect(w.lean).toMatchObject({
      measurable: false,
      expected_net_bps: null,
      expected_net_bps_low: -100.92,
      expected_net_bps_high: expect.closeTo(109.78, 9),
    });
    for (const text of [w.reasoning, w.edge.reason]) {
      expect(text).toContain('not measurable (90 % interval −100.9 to +109.8 bps spans 0)');
      expect(text).not.toContain('+4.4');
    }
    // The same cell once its calls pay: BUY/SELL, and the confidence means the call's chance.
    const paid: CalibrationTable = {
      ...skilledUnpaid,
      cells: {
        'spot:1h': {
          ...skilledUnpaid.cells['spot:1h']!,
          emit: true,
          net: { meanBps: 4, lowBps: 1, calls: 5000 },
        },
      },
    };
    const c = computeVerdict(state, undefined, paid, { holdBand: 0 });
    expect(c.call).toBe(v.lean!.direction);
    expect(c.confidence).toBe(50);
    expect(c.confidence_meaning).toContain(`50 = the calibrated chance that this ${c.call} beats`);
    // An older table without the measured share falls back to the training curve's base rate.
    const old: CalibrationTable = {
      ...defaultCalibration,
      cells: { 'spot:1h': { emit: false, direction: -1, curve: { ...FLAT, baseRate: 0.42 }, evidence: [] } },
    };
    const o = computeVerdict(state, undefined, old, { holdBand: 0 });
    expect(o.confidence).toBe(58);
    expect(o.lean).toMatchObject({ timing_skill: false, expected_net_bps: null });
    expect(o.confidence_meaning).toContain('training months');
    // Rebuilt from the record (an answer from the log, a scan or digest row, a webhook payload):
    // the same lean and the same words as when it was computed.
    const record = (x: typeof v) => ({
      exchange: 'BINANCE_SPOT' as const,
      timeframe: '1h' as const,
      call: x.call,
      confidence: x.confidence,
      score: x.score,
      engineVersion: ENGINE_VERSION,
    });
    for (const [x, table] of [
      [v, skilledUnpaid],
      [w, wide],
      [c, paid],
      [o, old],
    ] as const)
      expect(recordedMeaning(record(x), table)).toEqual({
        lean: x.lean,
        confidence_meaning: x.confidence_meaning,
      });
    // An older engine's verdict: no lean restated from today's table, and words that say so.
    const older = recordedMeaning({ ...record(v), engineVersion: 'signals-3' }, skilledUnpaid);
    expect(older.lean).toBeNull();
    expect(older.confidence_meaning).toContain(
      `${v.confidence} = the number engine signals-3 gave this HOLD`,
    );
    expect(recordedMeaning({ ...record(c), engineVersion: 'signals-3' }, paid).confidence_meaning).toContain(
      `this ${c.call} beats the 10 bps round-trip fee`,
    );
    // The reasoning rebuilt from the record (its inputs as the engine records them: the indicator
    // summary and the perp lean; its forecast, edge, lean and meaning) says what the computed one says, in its words, but
    // for the votes, which the record holds as their two ratings: HOLD and BUY/SELL, both fading.
    const inputs = (x: typeof v) => ({ ...x.indicators, perp_lean: x.perp_lean });
    const rebuilt = (x: typeof v, table: CalibrationTable, engineVersion = ENGINE_VERSION) =>
      recordedReasoning(
        { ...record(x), engineVersion, regime: x.regime, price: x.price, inputs: inputs(x) },
        {
          volatility: x.volatility,
          edge: x.edge,
          ...recordedMeaning({ ...record(x), engineVersion }, table),
        },
        // These verdicts were computed with a HOLD band of 0; an engine's is its table's.
        { ...table, holdBand: 0 },
      );
    const signed = (x: number) => (x >= 0 ? '+' : '') + x.toFixed(2);
    const votesSaid = (x: typeof v) =>
      `MA rating ${signed(x.votes.ma_mean)}; oscillator rating ${signed(x.votes.oscillator_mean)}.`;
    const afterVotes = (text: string) => text.slice(text.indexOf('). ') + 2);
    for (const [x, table] of [
      [v, skilledUnpaid],
      [w, wide],
      [c, paid],
      [o, old],
    ] as const) {
      expect(x.reasoning).toContain('favoured fading the score');
      expect(rebuilt(x, table)).toBe(`${votesSaid(x)}${afterVotes(x.reasoning)}`);
    }
    expect(c.reasoning).toContain(`Confidence ${c.confidence}: share of training-period`);
    // An older engine's verdict: this table's fit is not its own, so no fading sentence, and its
    // confidence is said as confidence_meaning says it.
    const olderText = rebuilt(v, skilledUnpaid, 'signals-3');
    expect(olderText).not.toContain('favoured fading');
    expect(olderText).toContain(
      `HOLD: ${v.edge.reason}. ${v.confidence} = the number engine signals-3 gave this HOLD`,
    );
  });

  it('throws InsufficientHistoryError instead of making a verdict up', () => {
    const state = stateFrom(candles.slice(0, 40));
    expect(() => computeVerdict(state, undefined, defaultCalibration)).toThrow(InsufficientHistoryError);
    expect(() => computeRegime(stateFrom([]))).toThrow(InsufficientHistoryError);
    try {
      computeVerdict(state, undefined, defaultCalibration);
    } catch (error) {
      expect((error as InsufficientHistoryError).candles).toBe(40);
      expect((error as InsufficientHistoryError).missing).toContain('sma50');
    }
  });

  it('perpetual context: extreme positive funding leans SELL, negative leans BUY, ordinary funding is neutral', () => {
    const state = stateFrom(candles.slice(0, 400));
    const base = computeScore(state).score;
    const hot = computeScore(state, { funding: { rate: 0.002, intervalHours: 8 } });
    const cold = computeScore(state, { funding: { rate: -0.002, intervalHours: 8 } });
    const usual = computeScore(state, { funding: { rate: 0.0001, intervalHours: 8 } });
    expect(hot.perpLean).toBe(-1);
    expect(cold.perpLean).toBe(1);
    expect(usual.perpLean).toBe(0);
    expect(hot.score).toBeLessThan(cold.score);
    expect(usual.score).toBeCloseTo(0.8 * base, 12);
    const premium = computeScore(state, { perpClose: 101, spotClose: 100 });
    expect(premium.basis).toBeCloseTo(0.01, 12);
    expect(premium.perpLean).toBe(-1);
    expect(() =>
      computeVerdict(state, { funding: { rate: 0.002, intervalHours: 1 } }, defaultCalibration),
    ).not.toThrow();
  });
});

describe('no look-ahead', () => {
  it('a verdict at t does not change when candles after t, or the still-open candle, are altered', () => {
    const t = candles[300]!.openTime + HOUR + 30 * 60_000; // half-way through candle 301
    const before = verdictAt(candles, t);
    const altered = candles.map((c, i) =>
      i >= 301
        ? { ...c, open: c.open * 3, high: c.high * 3, low: c.low * 0.2, close: c.close * 0.3, volume: 1 }
        : c,
    );
    const after = verdictAt(altered, t);
    expect(after).toEqual(before);
    expect(before.candle_close_time).toBe(candles[300]!.openTime + HOUR);
    // The same alteration before t does move the verdict: the test can see a change.
    const early = candles.map((c, i) => (i >= 290 ? { ...c, close: c.close * 0.7, low: c.low * 0.7 } : c));
    expect(verdictAt(early, t).score).not.toBe(before.score);
  });
});
