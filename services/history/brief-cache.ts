import type { TrackRecordBrief } from '../../contracts/history.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { bucketOf, DAY_MS, type TrackRecordState, trackRecordBrief } from './track-record.ts';

/** Where the briefs come from: the track-record state and a number that moves when it changes. */
export interface BriefSource {
  readonly state: TrackRecordState;
  readonly revision: number;
}

/**
 * The track-record line of each (exchange, timeframe, confidence bucket), made once and handed to
 * every trade call of that market until the track record moves. Profiled under load, merging the
 * 90 days' cells for every call was 4-5 % of a keyed MCP call, for a line that changes only when an
 * outcome resolves. A line depends on the state, on the market and bucket, and on the UTC day of
 * `asOf` (the window's first day); the entries are dropped whenever the source's revision or that day moves,
 * so a line is never older than the state it is read with.
 *
 * The same line object is handed out again: callers must not change it (it is frozen). Being the
 * same object also lets the answer's JSON of it be reused (api/mcp/answer-json.ts).
 */
export class BriefCache {
  private readonly lines = new Map<string, TrackRecordBrief>();
  private revision = Number.NaN;
  private day = Number.NaN;

  constructor(private readonly source: BriefSource) {}

  brief(
    call: { exchange: Exchange; timeframe: Timeframe; confidence: number },
    asOf: number,
  ): TrackRecordBrief {
    const revision = this.source.revision;
    const day = Math.floor(asOf / DAY_MS);
    if (revision !== this.revision || day !== this.day) {
      this.lines.clear();
      this.revision = revision;
      this.day = day;
    }
    const key = `${call.exchange}|${call.timeframe}|${bucketOf(call.confidence)}`;
    let line = this.lines.get(key);
    if (line === undefined) {
      line = frozen(trackRecordBrief(this.source.state, call, asOf));
      this.lines.set(key, line);
    }
    return line;
  }
}

function frozen(line: TrackRecordBrief): TrackRecordBrief {
  if (line.interval) Object.freeze(line.interval);
  return Object.freeze(line);
}
