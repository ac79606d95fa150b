import type { Vote, Votes } from '../../../contracts/signals.ts';
import { MA_PERIODS, type Readings } from './market-state.ts';

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
  for (const v of Object.values(votes)) {
    if (v === null) continue;
    sum += v;
    n++;
  }
  return n === 0 ? 0 : sum / n;
}

function both(a: number | null, b: number | null): a is number {
  return a !== null && b !== null;
}

export function computeVotes(r: Readings): Votes {
  const ma: Record<string, Vote> = {};
  for (const p of MA_PERIODS) {
    ma[`sma${p}`] = maVote(r.close, r.sma[p] ?? null);
    ma[`ema${p}`] = maVote(r.close, r.ema[p] ?? null);
  }
  ma.ichimoku_base = maVote(r.close, r.ichimokuBase);
  ma.vwma20 = maVote(r.close, r.vwma20);
  ma.hma9 = maVote(r.close, r.hma9);

  const osc: Record<string, Vote> = {};
  osc.rsi = both(r.rsi, r.rsiPrev)
    ? r.rsi < 30 && r.rsi > r.rsiPrev!
      ? 1
      : r.rsi > 70 && r.rsi < r.rsiPrev!
        ? -1
        : 0
    : null;
  osc.stoch = both(r.stochK, r.stochD)
    ? r.stochK < 20 && r.stochD! < 20 && r.stochK > r.stochD!
      ? 1
      : r.stochK > 80 && r.stochD! > 80 && r.stochK < r.stochD!
        ? -1
        : 0
    : null;
  osc.cci = both(r.cci, r.cciPrev)
    ? r.cci < -100 && r.cci > r.cciPrev!
      ? 1
      : r.cci > 100 && r.cci < r.cciPrev!
        ? -1
        : 0
    : null;
  osc.adx =
    both(r.adx, r.adxPrev) && both(r.plusDi, r.minusDi)
      ? r.adx > 20 && r.adx > r.adxPrev! && r.plusDi > r.minusDi!
        ? 1
        : r.adx > 20 && r.adx > r.adxPrev! && r.plusDi < r.minusDi!
          ? -1
          : 0
      : null;
  osc.ao = both(r.ao, r.aoPrev)
    ? r.ao > 0 && r.ao > r.aoPrev!
      ? 1
      : r.ao < 0 && r.ao < r.aoPrev!
        ? -1
        : 0
    : null;
  osc.momentum = both(r.mom, r.momPrev) ? sign(r.mom - r.momPrev!) : null;
  osc.macd = both(r.macd, r.macdSignal) ? sign(r.macd - r.macdSignal!) : null;
  osc.stoch_rsi = both(r.stochRsiK, r.stochRsiD)
    ? r.stochRsiK < 20 && r.stochRsiD! < 20 && r.stochRsiK > r.stochRsiD!
      ? 1
      : r.stochRsiK > 80 && r.stochRsiD! > 80 && r.stochRsiK < r.stochRsiD!
        ? -1
        : 0
    : null;
  osc.williams_r = both(r.williamsR, r.williamsRPrev)
    ? r.williamsR < -80 && r.williamsR > r.williamsRPrev!
      ? 1
      : r.williamsR > -20 && r.williamsR < r.williamsRPrev!
        ? -1
        : 0
    : null;
  // Bull/Bear Power: TradingView buys when the trend is up and bear power is negative but
  // rising, sells when the trend is down and bull power is positive but falling; trend = EMA 50.
  const ema50 = r.ema[50] ?? null;
  osc.bull_bear_power =
    ema50 !== null && both(r.bearPower, r.bearPowerPrev) && both(r.bullPower, r.bullPowerPrev)
      ? r.close > ema50 && r.bearPower < 0 && r.bearPower > r.bearPowerPrev!
        ? 1
        : r.close < ema50 && r.bullPower > 0 && r.bullPower < r.bullPowerPrev!
          ? -1
          : 0
      : null;
  osc.ultimate = r.ultimate === null ? null : r.ultimate > 70 ? 1 : r.ultimate < 30 ? -1 : 0;

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
