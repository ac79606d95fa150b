import { OUTCOME_AFTER_CANDLES, type TrackRecordResponse } from '../../contracts/history.ts';
import { type Exchange, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { cellKey } from '../engine/signals/calibration.ts';
import { DAY_MS, WINDOW_DAYS } from './track-record.ts';

/**
 * The track record as the get_track_record tool answers it: GET /api/track-record's answer for
 * the window, narrowed to what an agent asked for, so that every answer fits in one MCP tool
 * result (MAX_TOOL_RESULT_CHARS, the JSON sent twice: structuredContent and its text). The free
 * baselines alone are ~41,000 characters and a line with its confidence buckets ~1,400, with up
 * to 55 lines (5 venues x 11 timeframes) on a live deployment:
 *
 * - `exchange` / `timeframe` keep the lines of that venue / timeframe and the baselines of its
 *   cell (venue kind x timeframe: cells, risk and regime-label rows alike); `overall` stays the
 *   whole service's line;
 * - asked for neither, every line comes without its confidence buckets, and the risk baselines
 *   at the trade call's horizon (six candles) only: with a line for each of the 55 cells the
 *   answer was 174,006 characters with them; ask one venue or one timeframe for the rest;
 * - the day-by-day series is the chart's (GET /api/track-record, /track-record): empty here;
 * - narrowed to no line, `feedNote` says why: an empty list alone reads as a fault.
 */
export function trackRecordForAgents(
  record: TrackRecordResponse,
  ask: { exchange?: Exchange | undefined; timeframe?: Timeframe | undefined },
): TrackRecordResponse {
  const { exchange, timeframe } = ask;
  const narrowed = exchange !== undefined || timeframe !== undefined;
  const lines = record.lines
    .filter(
      (l) =>
        (exchange === undefined || l.exchange === exchange) &&
        (timeframe === undefined || l.timeframe === timeframe),
    )
    .map((l) => (narrowed ? l : { ...l, buckets: [] }));
  // The venue kind of the baselines' cells ('spot', 'perp'), from the same key the tables use.
  const kind = exchange === undefined ? undefined : cellKey(exchange, '1h').split(':')[0];
  const baselines = record.baselines && {
    ...record.baselines,
    cells: record.baselines.cells.filter((c) => {
      const [cellKind, cellTimeframe] = c.cell.split(':');
      return (
        (kind === undefined || cellKind === kind) && (timeframe === undefined || cellTimeframe === timeframe)
      );
    }),
    risk: record.baselines.risk.filter(
      (r) =>
        (narrowed || r.horizon === 'verdict') &&
        (kind === undefined || r.set === kind) &&
        (timeframe === undefined || r.timeframe === timeframe),
    ),
    // The regime labels' rows are per cell too (set = venue kind, timeframe).
    labels: record.baselines.labels.filter(
      (l) => (kind === undefined || l.set === kind) && (timeframe === undefined || l.timeframe === timeframe),
    ),
  };
  const feedNote =
    narrowed && lines.length === 0
      ? `${record.feedNote} ${noLine(record.window, exchange, timeframe)}`
      : record.feedNote;
  return { ...record, feedNote, lines, series: [], ...(baselines ? { baselines } : {}) };
}

/** Why a narrowed answer has no line: no verdict asked for has resolved in the window. */
function noLine(
  window: TrackRecordResponse['window'],
  exchange: Exchange | undefined,
  timeframe: Timeframe | undefined,
): string {
  const asked = [exchange, timeframe].filter((x) => x !== undefined).join(' ');
  const said = `No line for ${asked} in this window: no verdict of it has resolved there (each counts once its outcome, ${OUTCOME_AFTER_CANDLES} candles after its close, is in).`;
  const windowDays = WINDOW_DAYS[window];
  if (timeframe === undefined || windowDays === null) return said;
  const outcomeDays = (OUTCOME_AFTER_CANDLES * TIMEFRAME_MS[timeframe]) / DAY_MS;
  return outcomeDays >= windowDays
    ? `${said} A ${timeframe} verdict's outcome comes ${outcomeDays} days after its close, so a ${window} window never holds one: ask a longer window.`
    : said;
}
