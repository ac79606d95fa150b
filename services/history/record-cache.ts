import type { TrackRecordResponse, TrackRecordWindow } from '../../contracts/history.ts';
import { recordAsOf, recordPosition, type TrackRecordState, trackRecord } from './track-record.ts';

/**
 * Where the record comes from: the track-record projection's state, and a number that moves
 * whenever it may have changed (ProjectionRunner's revision). Without one, the record's position
 * and asOf are read from the state at every call.
 */
export interface RecordSource {
  readonly state: TrackRecordState;
  readonly revision?: number;
}

/**
 * The current track record of each window (currentTrackRecord), made once and handed out again
 * until the record moves: GET /api/track-record (and the page that reads it) and get_track_record
 * (and its resource) go through one of these. Made fresh, an answer merges every day cell and
 * resamples each line's risk intervals 200 times, on a route anyone may call: its cost grows with
 * the record (`npx tsx bench/history.bench.ts --only=track-record`). An answer depends on the
 * window, the time it is as of and the log position of the latest outcome folded
 * (recordPosition): the outcomes are folded in log order, so the same position is the same record.
 * Only the latest answer of each window is kept.
 *
 * The same answer object is handed out again: callers must not change it (it and what it holds
 * are frozen, but for the shipped baselines and carry fit, shared by every answer).
 */
export class RecordCache {
  private readonly latest = new Map<
    TrackRecordWindow,
    { asOf: number; position: number; record: TrackRecordResponse }
  >();

  /**
   * The record's position and latest due outcome, read once per revision of the source: each is a
   * pass over every cell, about 2 ms at 4,950 cells (a keyed object's values are slow to list).
   */
  private marks = { state: null as TrackRecordState | null, revision: Number.NaN, due: 0, position: 0 };

  constructor(private readonly source: RecordSource) {}

  /** The record over `window` as it stands at `now`: as of its latest due outcome (recordAsOf). */
  current(window: TrackRecordWindow, now: number): TrackRecordResponse {
    const state = this.source.state;
    const revision = this.source.revision;
    let marks = this.marks;
    if (revision === undefined || revision !== marks.revision || state !== marks.state) {
      // Infinity when no outcome counts: asOf is then `now` (recordAsOf).
      marks = {
        state,
        revision: revision ?? Number.NaN,
        due: recordAsOf(state, Infinity),
        position: recordPosition(state),
      };
      this.marks = marks;
    }
    const asOf = Math.min(now, marks.due);
    const { position } = marks;
    const known = this.latest.get(window);
    if (known && known.asOf === asOf && known.position === position) return known.record;
    const record = trackRecord(state, window, asOf);
    for (const [key, value] of Object.entries(record)) if (!SHARED.has(key)) deepFrozen(value);
    Object.freeze(record);
    this.latest.set(window, { asOf, position, record });
    return record;
  }
}

/** Parts every answer shares with the module they come from: left as they are. */
const SHARED = new Set<string>(['baselines', 'carry'] satisfies (keyof TrackRecordResponse)[]);

function deepFrozen<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFrozen(v);
    Object.freeze(value);
  }
  return value;
}
