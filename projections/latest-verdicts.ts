import {
  type Call,
  type Exchange,
  type FeedKind,
  marketKey,
  type Regime,
  type Timeframe,
} from '../contracts/market.ts';
import { defineProjection, type Projection } from './projection.ts';

export interface LatestVerdict {
  exchange: Exchange;
  coin: string;
  timeframe: Timeframe;
  verdictId: string;
  call: Call;
  confidence: number;
  /** Raw composite score in [-1, 1]: ranks digest rows of equal confidence. */
  score: number;
  regime: Regime;
  price: number;
  candleCloseTime: number;
  feed: FeedKind;
  hash: string;
  /** Forecast σ of the log return over the verdict horizon, percent, when recorded. */
  expectedMovePct: number | null;
  /** The engine that recorded it: its table states the verdict's lean and confidence meaning. */
  engineVersion: string;
  /** How many regime shifts this market has seen. */
  regimeShifts: number;
}

export type LatestVerdicts = Record<string, LatestVerdict>;

/** The latest verdict and regime per market: what scans, digests and analysts read first. */
export const latestVerdictsProjection: Projection<LatestVerdicts> = defineProjection({
  name: 'latest-verdicts',
  // 2: score and expectedMovePct, for digests ranked from this projection; 3: engineVersion, so
  // digest rows say what their confidence means.
  version: 3,
  eventTypes: ['VerdictRecorded', 'RegimeShifted'],
  initial: (): LatestVerdicts => ({}),
  evolve(state, event) {
    if (event.type === 'VerdictRecorded') {
      const d = event.data;
      const key = marketKey(d.exchange, d.coin, d.timeframe);
      state[key] = {
        exchange: d.exchange,
        coin: d.coin,
        timeframe: d.timeframe,
        verdictId: event.id,
        call: d.call,
        confidence: d.confidence,
        score: d.score,
        regime: d.regime,
        price: d.price,
        candleCloseTime: d.candleCloseTime,
        feed: d.feed,
        hash: d.hash,
        expectedMovePct:
          typeof d.inputs.vol_expected_move_pct === 'number' ? d.inputs.vol_expected_move_pct : null,
        engineVersion: d.engineVersion,
        regimeShifts: state[key]?.regimeShifts ?? 0,
      };
    } else {
      const current = state[marketKey(event.data.exchange, event.data.coin, event.data.timeframe)];
      if (current) current.regimeShifts += 1;
    }
    return state;
  },
});
