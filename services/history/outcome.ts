import type { EventData } from '../../contracts/events.ts';
import { FEE_BPS, HORIZON_CANDLES, OUTCOME_AFTER_CANDLES, replayLapOf } from '../../contracts/history.ts';
import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import type { CalibrationTable } from '../../contracts/signals.ts';
import { outcomeContent, outcomeHash } from '../../contracts/verdict-hash.ts';
import { recordedVolatility } from '../engine/recorded-volatility.ts';
import { defaultCalibration, recordedMeaning } from '../engine/signals/index.ts';

type Verdict = EventData<'VerdictRecorded'>;
export type Outcome = EventData<'VerdictOutcomeResolved'>;

/** The risk forecast a verdict served, as its outcome records it (null on verdicts without one). */
export function servedForecast(
  inputs: Record<string, unknown>,
  timeframe: Timeframe,
): EventData<'VerdictOutcomeResolved'>['volatility'] {
  const served = recordedVolatility(inputs, timeframe);
  return served
    ? {
        horizonCandles: served.horizon_candles,
        expectedMovePct: served.expected_move_pct,
        bandLow: served.band_low,
        bandHigh: served.band_high,
        bandCoverage: served.band_coverage,
      }
    : null;
}
/** When every horizon of a verdict has closed and its outcome can be resolved (feed time). */
export function outcomeDueAt(verdict: Pick<Verdict, 'candleCloseTime' | 'timeframe'>): number {
  return verdict.candleCloseTime + OUTCOME_AFTER_CANDLES * TIMEFRAME_MS[verdict.timeframe];
}

const direction = { BUY: 1, SELL: -1, HOLD: 0 } as const;

/** Return in direction `dir` after the round-trip fee, hundredths of a bp (docs/evaluation.md, Method). */
const netCentiBps = (dir: number, r6: number) => Math.round((dir * r6 * 10_000 - FEE_BPS) * 100);

/**
 * Labels a verdict from the candles that followed it: `following` must be exactly the
 * OUTCOME_AFTER_CANDLES candles after the verdict's close, contiguous; anything else is refused,
 * because a label from the wrong candles is worse than none. The label also names the verdict's
 * lean (from its recorded score and `table`, as every answer restating it does) with what
 * following it earned, and the risk forecast it served, so that the track record scores both
 * from outcomes alone. The outcome is chained: `ref.prevHash` is the previous chained outcome of
 * the verdict's stream (null or absent: the first), and `hash` covers it (verdict-hash.ts).
 */
export function resolveOutcome(
  ref: { verdictId: string; stream: string; revision: number; prevHash?: string | null },
  verdict: Verdict,
  following: readonly Candle[],
  table: CalibrationTable = defaultCalibration,
): Outcome {
  const step = TIMEFRAME_MS[verdict.timeframe];
  if (following.length < OUTCOME_AFTER_CANDLES) {
    throw new Error(`need ${OUTCOME_AFTER_CANDLES} candles after the verdict, got ${following.length}`);
  }
  const candles = following.slice(0, OUTCOME_AFTER_CANDLES);
  candles.forEach((c, i) => {
    if (c.openTime !== verdict.candleCloseTime + i * step) {
      throw new Error(`candle ${i} opens at ${c.openTime}, expected ${verdict.candleCloseTime + i * step}`);
    }
  });
  const price = verdict.price;
  const ret = (h: number) => candles[h - 1]!.close / price - 1;
  const dir = direction[verdict.call];
  const fee = FEE_BPS / 10_000;
  const r6 = ret(HORIZON_CANDLES);
  const window = candles.slice(0, HORIZON_CANDLES);
  const up = Math.max(...window.map((c) => c.high)) / price - 1;
  const down = Math.min(...window.map((c) => c.low)) / price - 1;
  const logs = candles.map((c, i) => Math.log(c.close / (i === 0 ? price : candles[i - 1]!.close)));
  const mean = logs.reduce((a, b) => a + b, 0) / logs.length;
  const variance = logs.reduce((a, b) => a + (b - mean) ** 2, 0) / (logs.length - 1);
  const lean = recordedMeaning(verdict, table).lean?.direction ?? null;
  const outcome: Omit<Outcome, 'hash'> = {
    exchange: verdict.exchange,
    coin: verdict.coin,
    timeframe: verdict.timeframe,
    verdictId: ref.verdictId,
    verdictStream: ref.stream,
    verdictRevision: ref.revision,
    verdictHash: verdict.hash,
    call: verdict.call,
    confidence: verdict.confidence,
    candleCloseTime: verdict.candleCloseTime,
    feed: verdict.feed,
    price,
    return1: ret(1),
    return6: r6,
    return24: ret(24),
    result: dir === 0 ? 'no-call' : dir * r6 > fee ? 'hit' : 'miss',
    feeBps: FEE_BPS,
    horizonCandles: HORIZON_CANDLES,
    netCentiBps: dir === 0 ? null : netCentiBps(dir, r6),
    maeBps: dir === 0 ? null : (dir > 0 ? down : -up) * 10_000,
    mfeBps: dir === 0 ? null : (dir > 0 ? up : -down) * 10_000,
    realisedVol: Math.sqrt(variance),
    lean,
    leanNetCentiBps: lean === null ? null : netCentiBps(direction[lean], r6),
    volatility: servedForecast(verdict.inputs, verdict.timeframe),
    // The verdict's own mark (its hash covers it): the track record counts no looped lap.
    ...(replayLapOf(verdict.inputs) > 0 ? { replayLap: replayLapOf(verdict.inputs) } : {}),
    prevHash: ref.prevHash ?? null,
  };
  return { ...outcome, hash: outcomeHash(outcomeContent(outcome)) };
}
