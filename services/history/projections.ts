import type { Call, Timeframe } from '../../contracts/market.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { outcomeDueAt } from './outcome.ts';
import { addPoint, type TrackRecordState } from './track-record.ts';

/** Folds every resolved outcome into the track record's per-day statistics. */
export const trackRecordProjection: Projection<TrackRecordState> = defineProjection({
  name: 'history-track-record',
  version: 1,
  eventTypes: ['VerdictOutcomeResolved'],
  initial: (): TrackRecordState => ({}),
  evolve(state, event) {
    addPoint(state, event.data);
    return state;
  },
});

export interface PendingVerdict {
  verdictId: string;
  stream: string;
  revision: number;
  exchange: string;
  coin: string;
  timeframe: Timeframe;
  call: Call;
  candleCloseTime: number;
  feed: 'live' | 'replay';
  dueAt: number;
}

export interface PendingOutcomes {
  pending: Record<string, PendingVerdict>;
}

/**
 * Verdicts still waiting for their outcome: added when recorded, removed when the outcome is in
 * the log. Its size is bounded by the verdicts of the last OUTCOME_AFTER_CANDLES candles.
 */
export const pendingOutcomesProjection: Projection<PendingOutcomes> = defineProjection({
  name: 'history-pending-outcomes',
  version: 1,
  eventTypes: ['VerdictRecorded', 'VerdictOutcomeResolved'],
  initial: (): PendingOutcomes => ({ pending: {} }),
  evolve(state, event) {
    if (event.type === 'VerdictRecorded') {
      const d = event.data;
      state.pending[event.id] = {
        verdictId: event.id,
        stream: event.stream,
        revision: event.revision,
        exchange: d.exchange,
        coin: d.coin,
        timeframe: d.timeframe,
        call: d.call,
        candleCloseTime: d.candleCloseTime,
        feed: d.feed,
        dueAt: outcomeDueAt(d),
      };
    } else {
      delete state.pending[event.data.verdictId];
    }
    return state;
  },
});
