import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import {
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
} from '../../adapters/market/errors.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import type { EventData } from '../../contracts/events.ts';
import {
  GetMarketRegimeInput,
  MAX_FUNDING_ARB_LIMIT,
  RegimeReading,
  RiskForecast,
  ScanFundingArbOutput,
  ScanTradeCallsOutput,
  TradeCall,
} from '../../contracts/tools.ts';
import { verifyVerdictChain } from '../../contracts/verdict-hash.ts';
import { AnswerJsonCache } from '../api/mcp/answer-json.ts';
import { keptRevision } from './answer-revisions.ts';
import { SignalEngine } from './engine.ts';
import { describeFailure } from './operation-errors.ts';
import { HOLD_LEFT_OUT } from './scan-ranking.ts';
import { verdictStream } from './verdict-recorder.ts';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** The shipped slice's 1h candles start here (5m and funding on 2025-09-20). */
const HOURLY_START = Date.UTC(2025, 2, 1);

/**
 * A trade call served from a verdict the log holds for another close carries the reasoning its
 * computation gave, in the same words from the recorded figures: every sentence the same but the
 * first, which gives the two vote ratings the record holds rather than the votes counted.
 */
function expectReasoningRebuilt(rebuilt: TradeCall, recorded: TradeCall): void {
  const afterVotes = (text: string) => text.slice(text.indexOf('). ') + 3);
  const signed = (x: number | null | undefined) => (x! >= 0 ? '+' : '') + x!.toFixed(2);
  expect(recorded.reasoning).toMatch(/^\d+ of \d+ moving averages/);
  expect(rebuilt.reasoning).toBe(
    `MA rating ${signed(recorded.indicators.ma_rating)}; oscillator rating ${signed(recorded.indicators.oscillator_rating)}. ${afterVotes(recorded.reasoning!)}`,
  );
  expect(afterVotes(rebuilt.reasoning!)).toContain(`HOLD: ${rebuilt.edge!.reason}.`);
}

describe('SignalEngine over the replayed real data', () => {
  let feed: ReplayFeed;
  let store: MemoryEventStore;
  let engine: SignalEngine;

  beforeEach(async () => {
    feed = await openReplayFeed({ run: false });
    store = new MemoryEventStore();
    engine = new SignalEngine({ feed, store, publicBaseUrl: 'https://signals.example' });
  });
  afterEach(async () => {
    await engine.close();
  });

  it('serves a trade call from closed candles, recorded before it is served', async () => {
    const call = TradeCall.parse(
      await engine.getTradeCall({ coin: 'btc', timeframe: '1h', exchange: 'BINANCE' }),
    );
    expect(call).toMatchObject({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE', feed: 'replay' });
    expect(call.timestamp * 1000).toBeLessThanOrEqual(feed.now());
    expect(call.timestamp * 1000).toBeGreaterThan(feed.now() - HOUR);
    expect(call.reasoning).toBeTruthy();
    expect(call.verifyUrl).toBe('https://signals.example/verify/verdicts-BINANCE-BTC-1h/0');
    // Perpetual context: funding from the replayed Binance settlements, basis against spot.
    expect(call.indicators.funding_apr).not.toBeNull();
    expect(call.indicators.basis).not.toBeNull();

    const [event] = await store.readStream(
      verdictStream({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' }),
    );
    expect(event).toMatchObject({ id: call.verdictId, type: 'VerdictRecorded' });
    expect((event!.data as EventData<'VerdictRecorded'>).hash).toBe(call.signalHash);
    expect(event!.data).toMatchObject({ call: call.call, confidence: call.confidence, trigger: 'request' });
    // No walk-forward evidence for the perpetual on 1h: HOLD, and the answer says why.
    expect(call.call).toBe('HOLD');
    expect(call.edge).toMatchObject({ cell: 'perp:1h', measured: false });
    expect(call.edge!.reason).toContain('no measured edge here');
    expect(call.volatility!.band_low).toBeLessThan(call.price);
    expect(call.volatility!.band_high).toBeGreaterThan(call.price);
  });

  it('answers {"coin":"BTC"} alone on the replay feed with defaults the replay serves', async () => {
    expect(engine.defaultExchange()).toBe('BINANCE_SPOT');
    const call = TradeCall.parse(await engine.getTradeCall({ coin: 'BTC' }));
    expect(call).toMatchObject({ exchange: 'BINANCE_SPOT', timeframe: '15m', feed: 'replay' });
    // spot:15m has timing skill but its calls did not beat the fee before the test months: HOLD,
    // with the lean it declines, what following it earned, and what the confidence means.
    expect(call.edge).toMatchObject({ cell: 'spot:15m', measured: false });
    expect(call.edge!.reason).toContain('no profit after the fee');
    expect(call.call).toBe('HOLD');
    expect(call.lean).toMatchObject({ timing_skill: true });
    expect(call.lean!.expected_net_bps!).toBeLessThan(0);
    expect(call.confidence_meaning).toContain(`${call.confidence} = how often standing aside was right`);
    expect(call.indicators).not.toHaveProperty('vol_band_low');
    // A second replica reading the recorded verdict rebuilds the same figures from the event.
    const other = new SignalEngine({ feed, store });
    const again = TradeCall.parse(await other.getTradeCall({ coin: 'BTC' }));
    expect(again.verdictId).toBe(call.verdictId);
    expect(again.volatility).toMatchObject({
      expected_move_pct: call.volatility!.expected_move_pct,
      band_low: call.volatility!.band_low,
      band_high: call.volatility!.band_high,
    });
  });

  it('answers a verdict the log holds from a later close (a replica ahead) with its lean and confidence meaning', async () => {
    const ahead = await openReplayFeed({ run: false });
    ahead.clock.advance(HOUR);
    const later = new SignalEngine({ feed: ahead, store });
    const recorded = TradeCall.parse(await later.getTradeCall({ coin: 'BTC' }));
    // This engine's own close is older than the one on record: it serves the record, rebuilt.
    const rebuilt = TradeCall.parse(await engine.getTradeCall({ coin: 'BTC' }));
    expect(rebuilt.verdictId).toBe(recorded.verdictId);
    expect(rebuilt.call).toBe('HOLD');
    expectReasoningRebuilt(rebuilt, recorded);
    // Asked without it, the rebuilt call has none, as a computed one.
    const bare = await engine.getTradeCall({ coin: 'BTC', includeReasoning: false });
    expect(bare.verdictId).toBe(recorded.verdictId);
    expect(bare.reasoning).toBeUndefined();
    expect(rebuilt.lean).toEqual(recorded.lean);
    expect(rebuilt.lean).toMatchObject({ timing_skill: true });
    expect(rebuilt.confidence_meaning).toBe(recorded.confidence_meaning);
    expect(rebuilt.confidence_meaning).toContain(
      `${rebuilt.confidence} = how often standing aside was right`,
    );
    // Why it is a HOLD is the cell's, as when it was computed: spot:15m has timing skill, so not
    // "no measured edge here" beside a lean with timing_skill true.
    expect(rebuilt.edge).toEqual(recorded.edge);
    expect(rebuilt.edge!.reason).toContain('no profit after the fee');
    await later.close();
  });

  it('rebuilds a later verdict of a cell whose net is not measurable with "not measurable" and its interval', async () => {
    const ahead = await openReplayFeed({ run: false });
    ahead.clock.advance(DAY);
    const later = new SignalEngine({ feed: ahead, store });
    const recorded = TradeCall.parse(await later.getTradeCall({ coin: 'BTC', timeframe: '1h' }));
    const rebuilt = TradeCall.parse(await engine.getTradeCall({ coin: 'BTC', timeframe: '1h' }));
    expect(rebuilt.verdictId).toBe(recorded.verdictId);
    expect(rebuilt.lean).toMatchObject({ measurable: false, expected_net_bps: null });
    expect(rebuilt.edge).toEqual(recorded.edge);
    expect(rebuilt.edge!.reason).toMatch(/not measurable \(90 % interval −[\d.]+ to \+[\d.]+ bps/);
    expectReasoningRebuilt(rebuilt, recorded);
    await later.close();
  });

  it('serves the same verdict until the next candle closes, then chains a new one', async () => {
    const first = await engine.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' });
    const again = await Promise.all(
      Array.from({ length: 10 }, () =>
        engine.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE', includeReasoning: false }),
      ),
    );
    expect(new Set(again.map((c) => c.verdictId))).toEqual(new Set([first.verdictId]));
    expect(again[0]!.reasoning).toBeUndefined();
    expect(await store.headPosition()).toBe(1);

    for (let i = 0; i < 5; i++) {
      feed.clock.advance(HOUR);
      await engine.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' });
    }
    const events = await store.readStream(
      verdictStream({ exchange: 'BINANCE', coin: 'ETH', timeframe: '1h' }),
    );
    const verdicts = events
      .filter((e) => e.type === 'VerdictRecorded')
      .map((e) => e.data as EventData<'VerdictRecorded'>);
    expect(verdicts).toHaveLength(6);
    expect(verdicts.map((v) => v.candleCloseTime)).toEqual(
      verdicts.map((_, i) => verdicts[0]!.candleCloseTime + i * HOUR),
    );
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });
    // Every regime change between consecutive verdicts appears as RegimeShifted.
    const changes = verdicts.slice(1).filter((v, i) => v.regime !== verdicts[i]!.regime).length;
    expect(events.filter((e) => e.type === 'RegimeShifted')).toHaveLength(changes);
  });

  it('keeps a regime reading and a risk forecast per candle: the same bytes as computed afresh, new ones after a close', async () => {
    const answers = new AnswerJsonCache();
    const bytes = (value: object) => {
      const kept = keptRevision(value);
      expect(kept).toBeDefined();
      return answers.serialise({ ...value, _service: { n: 1 } }, kept!).json;
    };
    // A second engine on the same feed and clock, asked once per candle: each of its answers is
    // computed when asked, from the same candles folded in the same order.
    const fresh = new SignalEngine({ feed, store: new MemoryEventStore() });
    for (let step = 0; step < 3; step++) {
      for (const input of [
        { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' },
        { coin: 'ETH', timeframe: '4h' },
      ] as const) {
        const regime = await engine.getMarketRegime(input);
        const forecast = await engine.getRiskForecast(input);
        // Kept: the very same objects until the candle closes.
        expect(await engine.getMarketRegime(input)).toBe(regime);
        expect(await engine.getRiskForecast(input)).toBe(forecast);
        const regimeAfresh = await fresh.getMarketRegime(input);
        const forecastAfresh = await fresh.getRiskForecast(input);
        expect(JSON.stringify(regime)).toBe(JSON.stringify(regimeAfresh));
        expect(JSON.stringify(forecast)).toBe(JSON.stringify(forecastAfresh));
        // The answer's JSON made from kept fields, twice, is the JSON of the object.
        for (const value of [regime, forecast, regime, forecast]) {
          expect(bytes(value)).toBe(JSON.stringify({ ...value, _service: { n: 1 } }));
        }
      }
      const before = await engine.getMarketRegime({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' });
      feed.clock.advance(HOUR);
      const after = await engine.getMarketRegime({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' });
      expect(after).not.toBe(before);
      expect(after.timestamp).toBe(before.timestamp + HOUR / 1000);
    }
  });

  it('does not parse again an input its channel parsed (and defaulted) already', async () => {
    const parsed = GetMarketRegimeInput.parse({ coin: 'BTC' });
    const served = await engine.getMarketRegime(parsed, { parsed: true });
    expect(served).toBe(await engine.getMarketRegime({ coin: 'btc' }));
  });

  it('reads the market regime with the metrics behind it', async () => {
    const reading = RegimeReading.parse(await engine.getMarketRegime({ coin: 'SOL' }));
    expect(reading).toMatchObject({ coin: 'SOL', timeframe: '4h', exchange: 'BINANCE_SPOT', feed: 'replay' });
    expect(reading.metrics).toHaveProperty('adx');
    expect(reading.metrics).toHaveProperty('vol_forecast_percentile');
    expect(reading.volatility.percentile).toBe(reading.metrics.vol_forecast_percentile);
    expect(reading.metrics).toHaveProperty('choppiness');
    expect(reading.confidence_meaning).toContain(
      `${reading.confidence} = how clearly ${reading.regime} leads`,
    );
    expect(reading.label_evidence).toMatch(
      /^On the 4h training months, volatile\/squeeze ranked later volatility/,
    );
  });

  it('serves the risk forecast on its own: the next candle, six candles and one day, banded', async () => {
    const risk = RiskForecast.parse(await engine.getRiskForecast({ coin: 'SOL', timeframe: '15m' }));
    expect(risk).toMatchObject({ coin: 'SOL', timeframe: '15m', exchange: 'BINANCE_SPOT', feed: 'replay' });
    expect(risk.horizons.map((h) => [h.horizon, h.candles, h.hours])).toEqual([
      ['next', 1, 0.25],
      ['verdict', 6, 1.5],
      ['day', 96, 24],
    ]);
    for (const h of risk.horizons) {
      expect(h.band_low).toBeLessThan(risk.price);
      expect(h.band_high).toBeGreaterThan(risk.price);
      expect(h.band_coverage).toBe(0.8);
      expect(h.model_timeframe).toBe('15m');
    }
    // A longer horizon moves more, and its band is wider.
    const [next, six, day] = risk.horizons;
    expect(next!.expected_move_pct).toBeLessThan(six!.expected_move_pct);
    expect(six!.expected_move_pct).toBeLessThan(day!.expected_move_pct);
    expect(day!.band_high - day!.band_low).toBeGreaterThan(next!.band_high - next!.band_low);
    // Each horizon's σ is in level with its band and with the others (the next candle's was 2–3×
    // too large when a log fit was turned into a mean with exp(ŷ + s²/2)): an 80 % band spans
    // about ±1.3 σ, and six candles move about √6 times one.
    for (const h of risk.horizons) {
      const halfWidth = (100 * Math.log(h.band_high / h.band_low)) / 2;
      expect(halfWidth / h.expected_move_pct).toBeGreaterThan(0.8);
      expect(halfWidth / h.expected_move_pct).toBeLessThan(1.8);
    }
    expect((next!.expected_move_pct * Math.sqrt(6)) / six!.expected_move_pct).toBeGreaterThan(0.6);
    expect((next!.expected_move_pct * Math.sqrt(6)) / six!.expected_move_pct).toBeLessThan(1.6);
    // The verdict horizon is the same forecast a trade call carries.
    const call = await engine.getTradeCall({ coin: 'SOL', timeframe: '15m' });
    expect(six!.expected_move_pct).toBeCloseTo(call.volatility!.expected_move_pct, 10);
    expect(risk.label_evidence).toContain('15m training months');
    expect(risk.evidence).toContain('docs/evaluation-risk.md');
    // What the replay cannot build (1m) or does not list is refused, not guessed.
    await expect(engine.getRiskForecast({ coin: 'SOL', timeframe: '1m' })).rejects.toBeInstanceOf(
      UnsupportedTimeframeError,
    );
    await expect(engine.getRiskForecast({ coin: 'PEPE', timeframe: '1h' })).rejects.toBeInstanceOf(
      UnknownCoinError,
    );
  });

  it('refuses what it cannot answer with typed errors, never a made-up verdict', async () => {
    await expect(engine.getTradeCall({ coin: 'PEPE', timeframe: '1h' })).rejects.toBeInstanceOf(
      UnknownCoinError,
    );
    await expect(engine.getTradeCall({ coin: 'BTC', timeframe: '1m' })).rejects.toBeInstanceOf(
      UnsupportedTimeframeError,
    );
    await expect(
      engine.getTradeCall({ coin: 'BTC', timeframe: '1h', exchange: 'OKX' }),
    ).rejects.toBeInstanceOf(UnsupportedExchangeError);
    // Three weeks into the slice there are 21 daily candles: not enough for the indicator set.
    const early = new SignalEngine({
      feed: await openReplayFeed({ run: false, start: HOURLY_START + 21 * DAY }),
      store,
    });
    const daily = await early.getTradeCall({ coin: 'BTC', timeframe: '1d' }).catch((e: unknown) => e);
    expect(describeFailure(daily)).toMatchObject({ status: 422, code: 'insufficient_history' });
    await early.close();
    await expect(engine.getTradeCall({ coin: 'BTC', timeframe: '7m' } as never)).rejects.toMatchObject({
      name: 'ZodError',
    });
    expect(await store.headPosition()).toBe(0);
  });

  it('scans the top markets and ranks the calls', async () => {
    const scan = ScanTradeCallsOutput.parse(
      await engine.scanTradeCalls({
        timeframe: '1h',
        exchange: 'BINANCE_SPOT',
        includeHolds: true,
        topN: 10,
      }),
    );
    expect(scan.scanned).toBe(6);
    expect(scan.calls.map((c) => c.coin).sort()).toEqual(['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP']);
    expect(scan.calls.map((c) => c.rank)).toEqual([1, 2, 3, 4, 5, 6]);
    const confidences = scan.calls.map((c) => c.confidence);
    expect(confidences).toEqual([...confidences].sort((a, b) => b - a));
    // A row's expected move sizes as its describe() says: budget ÷ (expectedMovePct / 100) is
    // get_trade_call's notional for that budget, to the cent.
    for (const row of scan.calls) {
      const sized = await engine.getTradeCall({
        coin: row.coin,
        timeframe: '1h',
        exchange: 'BINANCE_SPOT',
        riskBudgetUsd: 250,
      });
      expect(sized.verdictId).toBe(row.verdictId);
      expect(sized.volatility!.sizing.notional_usd).toBe(
        Math.round((250 / (row.expectedMovePct! / 100)) * 100) / 100,
      );
    }

    const strict = await engine.scanTradeCalls({
      timeframe: '1h',
      exchange: 'BINANCE_SPOT',
      minConfidence: 100,
    });
    expect(strict.calls.every((c) => c.confidence >= 100)).toBe(true);
    // Whatever the filter left out is named; an empty list says why.
    expect(strict.calls.length + strict.skipped.length).toBe(6);
    if (strict.calls.length === 0) expect(strict.note).toMatch(/below the minimum asked, 100/);
    // Each rank key orders the same rows its own way.
    const by = (rankBy: 'lean' | 'expectedMove' | 'volume') =>
      engine.scanTradeCalls({ timeframe: '1h', exchange: 'BINANCE_SPOT', topN: 10, rankBy });
    const lean = (await by('lean')).calls.map((c) => Math.abs(c.score));
    expect(lean).toEqual([...lean].sort((a, b) => b - a));
    const moves = (await by('expectedMove')).calls.map((c) => c.expectedMovePct!);
    expect(moves).toEqual([...moves].sort((a, b) => b - a));
    const volumes = (await by('volume')).calls.map((c) => c.quoteVolume24h ?? 0);
    expect(volumes).toEqual([...volumes].sort((a, b) => b - a));
    const limited = await engine.scanTradeCalls({
      timeframe: '1h',
      exchange: 'BINANCE_SPOT',
      includeHolds: true,
      limit: 1,
    });
    expect(limited.calls).toHaveLength(1);
    // The five markets the limit cut are named, each with where it ranked.
    expect(limited.skipped.map((s) => s.reason).sort()).toEqual(
      [2, 3, 4, 5, 6].map((rank) => `ranked ${rank} by confidence, below the limit asked (limit: 1)`),
    );
    expect([...limited.calls, ...limited.skipped].map((r) => r.coin).sort()).toEqual([
      'BNB',
      'BTC',
      'DOGE',
      'ETH',
      'SOL',
      'XRP',
    ]);
  });

  it('reports the markets a scan could not evaluate instead of dropping them', async () => {
    const early = new SignalEngine({
      feed: await openReplayFeed({ run: false, start: HOURLY_START + 21 * DAY }),
      store,
    });
    const scan = await early.scanTradeCalls({
      timeframe: '1d',
      exchange: 'BINANCE_SPOT',
      includeHolds: true,
    });
    expect(scan.calls).toEqual([]);
    expect(scan.skipped.map((s) => s.coin)).toEqual(['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP']);
    expect(scan.note).toBe(
      'none of the 6 markets scanned is listed (each is named in skipped): 6 could not be evaluated',
    );
    await early.close();
  });

  it('answers the first calls a newcomer makes: scan_trade_calls {} lists every market, scan_funding_arb {} returns rows', async () => {
    // No cell's calls beat the fee, so every answer is HOLD: the default scan lists each market's
    // HOLD with its lean, expected move and regime.
    const holds = ScanTradeCallsOutput.parse(await engine.scanTradeCalls({}));
    expect(holds).toMatchObject({ exchange: 'BINANCE_SPOT', timeframe: '15m', scanned: 6, skipped: [] });
    expect(holds.calls).toHaveLength(6);
    expect(holds.note).toBeUndefined();
    expect(holds.calls.every((c) => c.call === 'HOLD' && c.expectedMovePct! > 0 && c.regime)).toBe(true);
    // Calls only: nothing to list, and the answer says why, market by market.
    const callsOnly = ScanTradeCallsOutput.parse(await engine.scanTradeCalls({ includeHolds: false }));
    expect(callsOnly.calls).toEqual([]);
    expect(callsOnly.skipped.map((s) => s.coin)).toEqual(['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP']);
    expect(callsOnly.skipped.every((s) => s.reason === HOLD_LEFT_OUT)).toBe(true);
    expect(callsOnly.note).toBe(
      'none of the 6 markets scanned is listed (each is named in skipped): 6 answered HOLD and calls only was asked (includeHolds: false)',
    );
    // Every row says what its HOLD declines and what its confidence means, as the trade call does.
    for (const row of holds.calls) {
      const call = TradeCall.parse(await engine.getTradeCall({ coin: row.coin }));
      expect(call.verdictId).toBe(row.verdictId);
      expect({ lean: row.lean, confidence_meaning: row.confidence_meaning }).toEqual({
        lean: call.lean,
        confidence_meaning: call.confidence_meaning,
      });
      expect(row.confidence_meaning).toContain(`${row.confidence} = how often standing aside was right`);
    }
    const funding = ScanFundingArbOutput.parse(await engine.scanFundingArb({}));
    expect(funding.opportunities.length).toBeGreaterThan(0);
  });

  it('scans funding across venues with each venue normalised by its own interval', async () => {
    const scan = ScanFundingArbOutput.parse(
      await engine.scanFundingArb({ minSpreadBps: 0, limit: MAX_FUNDING_ARB_LIMIT }),
    );
    expect(scan.opportunities.length).toBeGreaterThan(0);
    for (const row of scan.opportunities) {
      expect(row.venues.length).toBeGreaterThanOrEqual(2);
      for (const v of row.venues) expect(v.hourlyRate).toBeCloseTo(v.rate / v.intervalHours, 15);
      const hourly = row.venues.map((v) => v.hourlyRate);
      expect(row.best.spreadBpsPerHour).toBeCloseTo((Math.max(...hourly) - Math.min(...hourly)) * 10_000, 9);
    }
    // Ranked by the carry expected to be collected net of both legs' fees, not by the spread now.
    const net = scan.opportunities.map((r) => r.carry.expectedNetCarryBps);
    expect(net).toEqual([...net].sort((a, b) => b - a));
    for (const row of scan.opportunities) {
      const { carry } = row;
      expect(carry.horizons.map((h) => h.hours)).toEqual([8, 24, 72, 168]);
      expect(carry.feeBps).toBeGreaterThan(0);
      for (const h of carry.horizons) {
        expect(h.naiveCarryBps).toBeCloseTo(row.best.spreadBpsPerHour * h.hours, 9);
        expect(h.expectedNetBps).toBeCloseTo(h.expectedCarryBps - carry.feeBps, 9);
      }
      if (carry.breakEvenHours !== null) expect(carry.breakEvenHours).toBeLessThanOrEqual(168);
    }
    expect(new Set(scan.venues.map((v) => v.exchange))).toContain('HYPERLIQUID');

    // Whether the fees are covered is said in words, from the figures listed.
    const within = scan.opportunities.filter(
      (r) => r.carry.breakEvenHours !== null && r.carry.breakEvenHours <= 72,
    ).length;
    expect(scan.note).toBeUndefined();
    expect(scan.fees).toMatch(
      new RegExp(
        `^${within === 0 ? 'none' : within === scan.opportunities.length ? 'all' : within} of the ${scan.opportunities.length} opportunities listed (is|are) expected to cover both legs' entry and exit fees within 72 h`,
      ),
    );

    // An empty list says which filter left out what.
    const none = await engine.scanFundingArb({ minSpreadBps: 10_000 });
    expect(none.opportunities).toEqual([]);
    expect(none.fees).toBeUndefined();
    expect(none.note).toMatch(
      /^no opportunity is listed for the \d+ coins scanned: \d+ have their best spread below the minimum asked, minSpreadBps 10000 \(bps per 8 h; the widest was [\d.]+\)$/,
    );
    const two = await engine.scanFundingArb({
      minSpreadBps: 0,
      exchanges: ['BINANCE', 'BYBIT'],
      coins: ['BTC'],
    });
    expect(
      two.opportunities.every(
        (r) => r.coin === 'BTC' && r.venues.every((v) => ['BINANCE', 'BYBIT'].includes(v.exchange)),
      ),
    ).toBe(true);
    // Replay has no volume for funding-only venues: a liquidity floor leaves them out.
    const liquid = await engine.scanFundingArb({ minSpreadBps: 0, minLiquidityUsd: 1 });
    expect(liquid.opportunities.every((r) => r.venues.every((v) => (v.quoteVolume24h ?? 0) >= 1))).toBe(true);
    // ...which leaves one venue per coin, and the note names the unknown volume as such.
    expect(liquid.opportunities).toEqual([]);
    expect(liquid.note).toMatch(
      /fewer than two venues left to compare \(minLiquidityUsd 1 left out \d+ listings whose 24 h volume is unknown \(quoteVolume24h null, on BYBIT, HYPERLIQUID\)\)/,
    );
  });

  it('does not let the past change: a market state never sees a candle twice', async () => {
    const a = await engine.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    feed.clock.advance(4 * HOUR);
    const b = await engine.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    // A fresh engine, fresh state, same feed time: the same verdict.
    const other = new SignalEngine({ feed, store: new MemoryEventStore() });
    const c = await other.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    expect(b.timestamp).toBe(a.timestamp + 4 * 3600);
    expect({ call: c.call, confidence: c.confidence, score: c.score }).toEqual({
      call: b.call,
      confidence: b.confidence,
      score: b.score,
    });
  });
});
