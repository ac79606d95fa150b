import { MarketDataError } from '../../adapters/market/errors.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { type HistoryRow, OUTCOME_AFTER_CANDLES } from '../../contracts/history.ts';
import { outcomeDueAt, resolveOutcome } from './outcome.ts';
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
  /** Outcomes with at least one column other than recomputed; the first MAX_LISTED columns listed. */
  mismatched: number;
  mismatches: OutcomeMismatch[];
}

/** At most this many mismatches are listed; `checked` still counts every row. */
const MAX_LISTED = 100;

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
 */
export class OutcomeRecompute {
  readonly report: RecomputeReport;
  private constructor(
    private readonly feed: ReplayFeed,
    dir: string,
  ) {
    this.report = { dir, checked: 0, notInData: 0, mismatched: 0, mismatches: [] };
  }

  static async open(dir: string): Promise<OutcomeRecompute> {
    return new OutcomeRecompute(await openReplayFeed({ dir, run: false }), dir);
  }

  async check(row: HistoryRow): Promise<void> {
    const content = rowContent(row);
    if (content === null || row.result === null) return;
    const verdict = { ...content, hash: row.hash };
    const due = outcomeDueAt(verdict);
    const laps = this.feed.laps;
    if (row.feed === 'live' && laps !== null && due > laps.end) {
      this.report.notInData++;
      return;
    }
    if (this.feed.now() < due) this.feed.clock.advance(due - this.feed.now());
    let candles: Awaited<ReturnType<ReplayFeed['candles']>>;
    try {
      candles = await this.feed.candles(row.exchange, row.coin, row.timeframe, {
        limit: OUTCOME_AFTER_CANDLES,
        until: due,
        min: OUTCOME_AFTER_CANDLES,
      });
    } catch (err) {
      if (!(err instanceof MarketDataError)) throw err;
      this.report.notInData++;
      return;
    }
    if (candles[0]?.openTime !== verdict.candleCloseTime) {
      this.report.notInData++;
      return;
    }
    const outcome = resolveOutcome(
      { verdictId: row.verdict_id, stream: row.stream, revision: row.revision },
      verdict,
      candles,
    );
    this.report.checked++;
    // Outcomes resolved before outcomes named the lean carry none: nothing to compare it with.
    const leanless = row.outcome_hash === null && row.lean === null && row.lean_net_centi_bps === null;
    let differs = false;
    for (const [column, field] of COLUMNS) {
      if (leanless && (column === 'lean' || column === 'lean_net_centi_bps')) continue;
      const exported = row[column];
      const recomputed = outcome[field] ?? null;
      if (exported === recomputed) continue;
      differs = true;
      if (this.report.mismatches.length >= MAX_LISTED) continue;
      this.report.mismatches.push({
        position: row.position,
        verdictId: row.verdict_id,
        stream: row.stream,
        column,
        exported,
        recomputed,
      });
    }
    if (differs) this.report.mismatched++;
  }

  close(): Promise<void> {
    return this.feed.close();
  }
}
