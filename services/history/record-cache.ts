import type { TrackRecordBrief, TrackRecordResponse, TrackRecordWindow } from '../../contracts/history.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { keptAnswerAs } from '../engine/answer-revisions.ts';
import {
  bucketOf,
  DAY_MS,
  recordAsOf,
  type TrackRecordState,
  trackRecord,
  trackRecordBrief,
} from './track-record.ts';
import { trackRecordForAgents } from './track-record-tool.ts';

/** The track-record projection's runner: its state, and its revision, which moves whenever the state may have changed. */
export type RecordSource = Pick<ProjectionRunner<TrackRecordState>, 'state' | 'revision'>;

/**
 * Values made from the track record, each made once and handed out again until the source's
 * revision or the scope they were made in (a UTC day, a time the record is as of) moves: then all
 * are dropped, so a value is never older than the state it is read with. A value handed out again
 * is the same object: callers must not change it (it and what it holds are frozen, but for the
 * shipped baselines and carry fit every answer shares with their module).
 */
class RevisionMemo<V> {
  private readonly values = new Map<string, V>();
  private revision = Number.NaN;
  private scope = Number.NaN;

  constructor(private readonly source: RecordSource) {}

  get(scope: number, key: string, make: (state: TrackRecordState) => V): V {
    const revision = this.source.revision;
    if (revision !== this.revision || scope !== this.scope) {
      this.values.clear();
      this.revision = revision;
      this.scope = scope;
    }
    let value = this.values.get(key);
    if (value === undefined) {
      value = frozen(make(this.source.state));
      this.values.set(key, value);
    }
    return value;
  }
}

/** Parts every answer shares with the module they come from: left as they are. */
const SHARED = new Set<string>(['baselines', 'carry'] satisfies (keyof TrackRecordResponse)[]);

function frozen<T>(value: T, top = true): T {
  if (value !== null && typeof value === 'object') {
    for (const [key, v] of Object.entries(value)) if (!(top && SHARED.has(key))) frozen(v, false);
    Object.freeze(value);
  }
  return value;
}

/**
 * The track-record line of each (exchange, timeframe, confidence bucket) a trade call carries,
 * made once per revision and UTC day of `asOf` (the window's first day): every keyed trade call
 * carries one, and merging the window's day cells for each call would repeat, call after call, the
 * same work for a line that changes only when an outcome resolves. Being the same object also lets
 * the answer's JSON of it be reused (api/mcp/answer-json.ts).
 */
export class BriefCache {
  private readonly lines: RevisionMemo<TrackRecordBrief>;

  constructor(source: RecordSource) {
    this.lines = new RevisionMemo(source);
  }

  brief(
    call: { exchange: Exchange; timeframe: Timeframe; confidence: number },
    asOf: number,
  ): TrackRecordBrief {
    const key = `${call.exchange}|${call.timeframe}|${bucketOf(call.confidence)}`;
    return this.lines.get(Math.floor(asOf / DAY_MS), key, (state) => trackRecordBrief(state, call, asOf));
  }
}

/** RecordCaches made in this process: each names its tool answers by its own number. */
let caches = 0;

/**
 * The current track record of each window (currentTrackRecord), made once per revision and time it
 * is as of: GET /api/track-record (and the page that reads it) and get_track_record (and its
 * resource) go through one of these. Made fresh, an answer merges every day cell and resamples
 * each line's risk intervals 200 times, on a route anyone may call: its cost grows with the record
 * (`npx tsx bench/history.bench.ts --only=track-record`).
 */
export class RecordCache {
  /**
   * The latest due outcome, read once per revision: a pass over every cell, which a cached answer
   * would otherwise pay on each request just to find the asOf it is cached under.
   */
  private readonly due: RevisionMemo<number>;
  private readonly answers: RevisionMemo<TrackRecordResponse>;
  /** get_track_record's answers (trackRecordForAgents), by window and ask. */
  private readonly agents: RevisionMemo<TrackRecordResponse>;
  /** Each answer's JSON as sent, kept as long as the answer is (its memo drops it on a move). */
  private readonly bodies = new WeakMap<TrackRecordResponse, Buffer>();
  /** Names this cache's tool answers apart from another cache's in the one JSON cache they share. */
  private readonly id = ++caches;

  constructor(source: RecordSource) {
    this.due = new RevisionMemo(source);
    this.answers = new RevisionMemo(source);
    this.agents = new RevisionMemo(source);
  }

  /** The record over `window` as it stands at `now`: as of its latest due outcome (recordAsOf). */
  current(window: TrackRecordWindow, now: number): TrackRecordResponse {
    const asOf = this.asOf(now);
    return this.answers.get(asOf, window, (state) => trackRecord(state, window, asOf));
  }

  /**
   * get_track_record's answer (trackRecordForAgents of current()), made once per answer it is
   * made from and handed out again as the same object: named a kept answer of the window and ask
   * (answer-revisions.ts), so that the MCP and keyed HTTP channels reuse its JSON rather than
   * serialise the record on every call (services/api/served-answers.ts), and the resources their
   * text of it. One name per window and ask: the JSON kept for an ask is that of its latest answer.
   */
  forAgents(
    window: TrackRecordWindow,
    now: number,
    ask: { exchange?: Exchange | undefined; timeframe?: Timeframe | undefined },
  ): TrackRecordResponse {
    const asOf = this.asOf(now);
    const key = `${window}|${ask.exchange ?? ''}|${ask.timeframe ?? ''}`;
    return this.agents.get(asOf, key, (state) =>
      keptAnswerAs(
        trackRecordForAgents(
          this.answers.get(asOf, window, () => trackRecord(state, window, asOf)),
          ask,
        ),
        `track-record\u0000${this.id}\u0000${key}`,
      ),
    );
  }

  /** The time the record is as of at `now`. */
  private asOf(now: number): number {
    // Infinity when no outcome counts: asOf is then `now` (recordAsOf).
    return Math.min(
      now,
      this.due.get(0, '', (state) => recordAsOf(state, Infinity)),
    );
  }

  /**
   * current()'s answer as the UTF-8 bytes of its JSON, made once per answer, so that handing a
   * cached answer out again serialises nothing: JSON.stringify's bytes, which are what Fastify
   * sends for the object (the route declares its answer's schema for the OpenAPI document only,
   * no response serializer that would drop or reorder fields). Nothing the answer holds is written
   * once made (it is frozen; its shared baselines and carry are its module's constants), so its
   * bytes cannot go stale; they are the same Buffer each time: callers must not write to it.
   */
  currentJson(window: TrackRecordWindow, now: number): Buffer {
    const answer = this.current(window, now);
    let body = this.bodies.get(answer);
    if (body === undefined) {
      body = Buffer.from(JSON.stringify(answer));
      this.bodies.set(answer, body);
    }
    return body;
  }
}
