import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { MarketDataError } from '../../adapters/market/errors.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { CANDLE_FOLDERS, parseCandleFileName } from '../../adapters/market/replay-layout.ts';
import { type HistoryRow, OUTCOME_AFTER_CANDLES, replayLapOf } from '../../contracts/history.ts';
import { type Outcome, outcomeDueAt, resolveOutcome } from './outcome.ts';
import { rowContent } from './rows.ts';

/** An outcome column whose exported value is not what the candles give. */
export interface OutcomeMismatch {
  position: number;
  verdictId: string;
  stream: string;
  column: string;
  exported: number | string | null;
  recomputed: number | string | null;
}

export interface RecomputeReport {
  dir: string;
  /** Outcomes recomputed from the folder's candles. */
  checked: number;
  /** Outcomes whose 24 following candles the folder does not hold (another venue, coin, or time). */
  notInData: number;
  /**
   * The candles those outcomes need, by venue, coin and timeframe: from the first verdict's candle
   * close to the last outcome's due time (ISO dates, UTC); empty when every outcome was checked.
   */
  uncovered: UncoveredSeries[];
  /** Outcomes with at least one column other than recomputed; the first MAX_LISTED columns listed. */
  mismatched: number;
  mismatches: OutcomeMismatch[];
}

/** The candles a file's outcomes need that a market-data folder does not hold. */
export interface UncoveredSeries {
  exchange: string;
  coin: string;
  timeframe: string;
  outcomes: number;
  from: string;
  to: string;
}

/**
 * The folder given holds no candle file in the shared layout (it is not a market-data folder, or
 * not the one meant): the option's fault. A folder that holds some, but whose files cannot be read
 * (permissions, a disk error, a corrupt file), fails otherwise: with the error met.
 */
export class NoMarketDataError extends Error {
  override readonly name = 'NoMarketDataError';
}

/**
 * Whether `dir` holds a candle file in the shared layout. A candle folder that is not there (or a
 * file in its place) holds none; any other failure to list one (EACCES, EIO) is thrown as met.
 */
function holdsCandles(dir: string): boolean {
  for (const folder of Object.keys(CANDLE_FOLDERS)) {
    let names: string[];
    try {
      names = readdirSync(join(dir, 'candles', folder));
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') continue;
      throw err;
    }
    if (names.some((name) => parseCandleFileName(name) !== undefined)) return true;
  }
  return false;
}

/**
 * A series' key: its venue, coin and timeframe joined by NUL. A coin read from a file may hold
 * one, but the venue and timeframe (their enums) hold none: the key splits back one way.
 */
const seriesKey = (row: Pick<HistoryRow, 'exchange' | 'coin' | 'timeframe'>): string =>
  `${row.exchange}\0${row.coin}\0${row.timeframe}`;

/** At most this many mismatches are listed; `checked` still counts every row. */
const MAX_LISTED = 100;

type Verdict = Parameters<typeof resolveOutcome>[1];

const COLUMNS = [
  ['return_1', 'return1'],
  ['return_6', 'return6'],
  ['return_24', 'return24'],
  ['result', 'result'],
  ['net_centi_bps', 'netCentiBps'],
  ['mae_bps', 'maeBps'],
  ['mfe_bps', 'mfeBps'],
  ['realised_vol', 'realisedVol'],
  ['lean', 'lean'],
  ['lean_net_centi_bps', 'leanNetCentiBps'],
] as const;

/**
 * Recomputes each exported outcome from a market-data folder in the shared layout (the one the
 * replay feed reads, e.g. sample-data/market) with the service's own labelling (outcome.ts), on
 * the candles the resolver would have read: those of the replay over that folder, which repeats
 * it shifted by whole days past its end, as the service's replay does. A verdict of the live feed
 * is recomputed only where the folder holds its candles as they were (before the folder's end).
 * An outcome of a looped lap (`replay_lap`) is also taken as matching when it matches the lap's
 * prices as scaled, not rounded to the data's decimals (ReplayFeedOptions.exactLaps): what a lapped
 * verdict was labelled from by a replay that did not round them.
 */
export class OutcomeRecompute {
  readonly report: RecomputeReport;
  /** report.uncovered by series (seriesKey): a row finds its own at once, not by a walk of them all. */
  readonly #uncovered = new Map<string, UncoveredSeries>();
  #exact: Promise<ReplayFeed> | null = null;
  private constructor(
    private readonly feed: ReplayFeed,
    private readonly dir: string,
  ) {
    this.report = { dir, checked: 0, notInData: 0, uncovered: [], mismatched: 0, mismatches: [] };
  }

  /** Throws NoMarketDataError for a folder of no candle file; what reading one met otherwise. */
  static async open(dir: string): Promise<OutcomeRecompute> {
    if (!holdsCandles(dir))
      throw new NoMarketDataError(
        `no candle files under ${join(dir, 'candles')}/{${Object.keys(CANDLE_FOLDERS).join(',')}}`,
      );
    return new OutcomeRecompute(await openReplayFeed({ dir, run: false }), dir);
  }

  /** The outcome `feed`'s candles give the row's verdict; null when they are not in the folder. */
  async #recompute(feed: ReplayFeed, row: HistoryRow, verdict: Verdict): Promise<Outcome | null> {
    const due = outcomeDueAt(verdict);
    if (feed.now() < due) feed.clock.advance(due - feed.now());
    let candles: Awaited<ReturnType<ReplayFeed['candles']>>;
    try {
      candles = await feed.candles(row.exchange, row.coin, row.timeframe, {
        limit: OUTCOME_AFTER_CANDLES,
        until: due,
        min: OUTCOME_AFTER_CANDLES,
      });
    } catch (err) {
      if (!(err instanceof MarketDataError)) throw err;
      return null;
    }
    if (candles[0]?.openTime !== verdict.candleCloseTime) return null;
    return resolveOutcome(
      { verdictId: row.verdict_id, stream: row.stream, revision: row.revision },
      verdict,
      candles,
    );
  }

  /** Counts an outcome the folder's candles do not give, under the series and dates it needs. */
  #notInData(row: HistoryRow, verdict: Verdict): void {
    this.report.notInData++;
    const from = new Date(verdict.candleCloseTime).toISOString().slice(0, 10);
    const to = new Date(outcomeDueAt(verdict)).toISOString().slice(0, 10);
    const key = seriesKey(row);
    const series = this.#uncovered.get(key);
    if (!series) {
      const { exchange, coin, timeframe } = row;
      const added = { exchange, coin, timeframe, outcomes: 1, from, to };
      this.#uncovered.set(key, added);
      this.report.uncovered.push(added);
      return;
    }
    series.outcomes++;
    if (from < series.from) series.from = from;
    if (to > series.to) series.to = to;
  }

  /** The columns whose exported value is not `outcome`'s. */
  #differing(row: HistoryRow, outcome: Outcome): Array<(typeof COLUMNS)[number]> {
    // Outcomes resolved before outcomes named the lean carry none: nothing to compare it with.
    const leanless = row.outcome_hash === null && row.lean === null && row.lean_net_centi_bps === null;
    return COLUMNS.filter(([column, field]) => {
      if (leanless && (column === 'lean' || column === 'lean_net_centi_bps')) return false;
      return row[column] !== (outcome[field] ?? null);
    });
  }

  async check(row: HistoryRow): Promise<void> {
    const content = rowContent(row);
    if (content === null || row.result === null) return;
    const verdict = { ...content, hash: row.hash };
    const laps = this.feed.laps;
    if (row.feed === 'live' && laps !== null && outcomeDueAt(verdict) > laps.end) {
      this.#notInData(row, verdict);
      return;
    }
    const outcome = await this.#recompute(this.feed, row, verdict);
    if (outcome === null) {
      this.#notInData(row, verdict);
      return;
    }
    this.report.checked++;
    let differing = this.#differing(row, outcome);
    if (differing.length > 0 && replayLapOf(verdict.inputs) > 0) {
      this.#exact ??= openReplayFeed({ dir: this.dir, run: false, exactLaps: true });
      const exact = await this.#recompute(await this.#exact, row, verdict);
      if (exact !== null && this.#differing(row, exact).length === 0) differing = [];
    }
    if (differing.length === 0) return;
    this.report.mismatched++;
    for (const [column, field] of differing) {
      if (this.report.mismatches.length >= MAX_LISTED) break;
      this.report.mismatches.push({
        position: row.position,
        verdictId: row.verdict_id,
        stream: row.stream,
        column,
        exported: row[column],
        recomputed: outcome[field] ?? null,
      });
    }
  }

  async close(): Promise<void> {
    await this.feed.close();
    await (await this.#exact)?.close();
  }
}
