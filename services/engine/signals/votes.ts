import type { Vote, Votes } from '../../../contracts/signals.ts';
import type { MaPeriod, Readings } from './market-state.ts';

/**
 * TradingView Technical Ratings rules, applied to closed-candle readings. MA votes: sign of
 * close − MA (15 MAs as TradingView: SMA/EMA 10…200, Ichimoku base line, VWMA 20, HMA 9).
 * Oscillator votes follow TradingView's published conditions; where one needs a previous value
 * ("rising"), it is the reading one closed candle earlier.
 */

const sign = (x: number): Vote => (x > 0 ? 1 : x < 0 ? -1 : 0);

function maVote(close: number, ma: number | null): Vote {
  return ma === null ? null : sign(close - ma);
}

function mean(votes: Record<string, Vote>): number {
  let sum = 0;
  let n = 0;
  // for…in rather than Object.values: no array per call (the vote objects are plain literals).
  for (const k in votes) {
    const v = votes[k]!;
    if (v === null) continue;
    sum += v;
    n++;
  }
  return n === 0 ? 0 : sum / n;
}

function both(a: number | null, b: number | null): a is number {
  return a !== null && b !== null;
}

/** Buy when oversold (below `low`) and turning up, sell when overbought (above `high`) and turning down. */
function reversalVote(value: number | null, prev: number | null, low: number, high: number): Vote {
  if (value === null || prev === null) return null;
  return value < low && value > prev ? 1 : value > high && value < prev ? -1 : 0;
}

/** Stochastic-style: buy when both lines are below 20 and %K is above %D, sell when both are above 80 and %K below. */
function stochasticVote(k: number | null, d: number | null): Vote {
  if (k === null || d === null) return null;
  return k < 20 && d < 20 && k > d ? 1 : k > 80 && d > 80 && k < d ? -1 : 0;
}

type MaVoteName = `${'sma' | 'ema'}${MaPeriod}` | 'ichimoku_base' | 'vwma20' | 'hma9';

export function computeVotes(r: Readings): Votes {
  const close = r.close;
  const { sma, ema } = r;
  // One object literal (one hidden class) instead of 15 keyed stores of built key names; the
  // `satisfies` keeps it in step with MA_PERIODS, and the key order is the one votes always had.
  const ma = {
    sma10: maVote(close, sma.p10),
    ema10: maVote(close, ema.p10),
    sma20: maVote(close, sma.p20),
    ema20: maVote(close, ema.p20),
    sma30: maVote(close, sma.p30),
    ema30: maVote(close, ema.p30),
    sma50: maVote(close, sma.p50),
    ema50: maVote(close, ema.p50),
    sma100: maVote(close, sma.p100),
    ema100: maVote(close, ema.p100),
    sma200: maVote(close, sma.p200),
    ema200: maVote(close, ema.p200),
    ichimoku_base: maVote(close, r.ichimokuBase),
    vwma20: maVote(close, r.vwma20),
    hma9: maVote(close, r.hma9),
  } satisfies Record<MaVoteName, Vote>;

  // Bull/Bear Power: TradingView buys when the trend is up and bear power is negative but
  // rising, sells when the trend is down and bull power is positive but falling; trend = EMA 50.
  const ema50 = ema.p50;
  const osc: Record<string, Vote> = {
    rsi: reversalVote(r.rsi, r.rsiPrev, 30, 70),
    stoch: stochasticVote(r.stochK, r.stochD),
    cci: reversalVote(r.cci, r.cciPrev, -100, 100),
    adx:
      both(r.adx, r.adxPrev) && both(r.plusDi, r.minusDi)
        ? r.adx > 20 && r.adx > r.adxPrev! && r.plusDi > r.minusDi!
          ? 1
          : r.adx > 20 && r.adx > r.adxPrev! && r.plusDi < r.minusDi!
            ? -1
            : 0
        : null,
    ao: both(r.ao, r.aoPrev)
      ? r.ao > 0 && r.ao > r.aoPrev!
        ? 1
        : r.ao < 0 && r.ao < r.aoPrev!
          ? -1
          : 0
      : null,
    momentum: both(r.mom, r.momPrev) ? sign(r.mom - r.momPrev!) : null,
    macd: both(r.macd, r.macdSignal) ? sign(r.macd - r.macdSignal!) : null,
    stoch_rsi: stochasticVote(r.stochRsiK, r.stochRsiD),
    williams_r: reversalVote(r.williamsR, r.williamsRPrev, -80, -20),
    bull_bear_power:
      ema50 !== null && both(r.bearPower, r.bearPowerPrev) && both(r.bullPower, r.bullPowerPrev)
        ? r.close > ema50 && r.bearPower < 0 && r.bearPower > r.bearPowerPrev!
          ? 1
          : r.close < ema50 && r.bullPower > 0 && r.bullPower < r.bullPowerPrev!
            ? -1
            : 0
        : null,
    ultimate: r.ultimate === null ? null : r.ultimate > 70 ? 1 : r.ultimate < 30 ? -1 : 0,
  };

  const maMean = mean(ma);
  const oscMean = mean(osc);
  return {
    ma,
    oscillators: osc,
    ma_mean: maMean,
    oscillator_mean: oscMean,
    technical_rating: (maMean + oscMean) / 2,
  };
}
