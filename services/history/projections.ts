import { firstIndex } from '../../adapters/first-index.ts';
import { outcomeStream } from '../../contracts/history.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { outcomeDueAt } from './outcome.ts';
import { builtIndex, type PendingOutcomes, type PendingVerdict } from './pending-index.ts';

export type { PendingOutcomes, PendingVerdict } from './pending-index.ts';

import { addPoint, type TrackRecordState } from './track-record.ts';

/** Folds every resolved outcome (its call and its risk forecast) into the track record's per-day statistics. */
export const trackRecordProjection: Projection<TrackRecordState> = defineProjection({
  name: 'history-track-record',
  // 2: every resolved verdict also scores the risk forecast it served.
  // 3: each cell keeps the latest time an outcome of it fell due (the record's asOf).
  // 4: and the log position of its latest outcome (the record's asOfPosition).
  // 5: counts by feed, and a looped replay lap's outcomes apart (counted in no figure).
  // 6: a looped lap's outcome no longer moves the record's asOf (it counts in no figure).
  version: 6,
  eventTypes: ['VerdictOutcomeResolved'],
  initial: (): TrackRecordState => ({}),
  evolve(state, event) {
    addPoint(state, event.data, event.position);
    return state;
  },
});

/**
 * Verdicts still waiting for their outcome: added when recorded, removed when the outcome is in
 * the log. Its size is bounded by the verdicts of the last OUTCOME_AFTER_CANDLES candles. Beside
 * them, the head of each verdict stream's outcome chain (one hash per market). The resolver reads
 * the verdicts by market and due time (pending-index.ts), an index this fold keeps once built.
 */
export const pendingOutcomesProjection: Projection<PendingOutcomes> = defineProjection({
  name: 'history-pending-outcomes',
  // 2: the outcome chains' heads.
  version: 2,
  eventTypes: ['VerdictRecorded', 'VerdictOutcomeResolved'],
  initial: (): PendingOutcomes => ({ pending: {}, heads: {} }),
  evolve(state, event) {
    if (event.type === 'VerdictRecorded') {
      const d = event.data;
      const replaced = state.pending[event.id];
      const p: PendingVerdict = {
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
      state.pending[event.id] = p;
      builtIndex(state)?.add(p, replaced);
    } else {
      const resolved = state.pending[event.data.verdictId];
      if (resolved) {
        delete state.pending[event.data.verdictId];
        builtIndex(state)?.remove(resolved);
      }
      // Only the outcome the export attaches (the first of the verdict's outcome stream) is chained.
      if (event.data.hash && event.stream === outcomeStream(event.data.verdictId))
        state.heads[event.data.verdictStream] = event.data.hash;
    }
    return state;
  },
});

/**
 * Which verdicts have an outcome in the log, as runs of revisions per verdict stream: outcomes
 * resolve nearly every verdict, roughly in revision order, so a market's labelled verdicts are a
 * handful of runs however long its history. The export asks it before reading a verdict's outcome
 * stream, and reads only for verdicts it names.
 */
export interface LabelledVerdicts {
  /** Verdict stream → sorted, disjoint inclusive runs [from, to, from, to, ...] of revisions. */
  runs: Record<string, number[]>;
}

/** The first run starting after `revision`; the run before it is the one that may hold it. */
function runAfter(runs: readonly number[], revision: number): number {
  return firstIndex(runs.length / 2, (i) => runs[i * 2]! > revision);
}

export function addRevision(runs: number[], revision: number): void {
  const lo = runAfter(runs, revision);
  const before = lo - 1;
  const joinsBefore = before >= 0 && runs[before * 2 + 1]! >= revision - 1;
  const joinsAfter = lo * 2 < runs.length && runs[lo * 2]! === revision + 1;
  if (joinsBefore && runs[before * 2 + 1]! >= revision) return;
  if (joinsBefore && joinsAfter) runs.splice(before * 2 + 1, 2);
  else if (joinsBefore) runs[before * 2 + 1] = revision;
  else if (joinsAfter) runs[lo * 2] = revision;
  else runs.splice(lo * 2, 0, revision, revision);
}

export function hasRevision(runs: readonly number[] | undefined, revision: number): boolean {
  if (!runs) return false;
  const lo = runAfter(runs, revision);
  return lo > 0 && runs[(lo - 1) * 2 + 1]! >= revision;
}

export const labelledVerdictsProjection: Projection<LabelledVerdicts> = defineProjection({
  name: 'history-labelled-verdicts',
  version: 1,
  eventTypes: ['VerdictOutcomeResolved'],
  initial: (): LabelledVerdicts => ({ runs: {} }),
  evolve(state, event) {
    // Only where the export looks: the outcome stream named after the verdict it labels.
    if (event.stream !== outcomeStream(event.data.verdictId)) return state;
    state.runs[event.data.verdictStream] ??= [];
    addRevision(state.runs[event.data.verdictStream]!, event.data.verdictRevision);
    return state;
  },
});
