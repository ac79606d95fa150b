import type { HistoryRow, TrackRecordResponse, TrackRecordWindow } from '../../contracts/history.ts';
import { verdictHash } from '../../contracts/verdict-hash.ts';
import { recordedVolatility } from '../engine/recorded-volatility.ts';
import { rowContent } from './rows.ts';
import { addPoint, type TrackRecordState, trackRecord } from './track-record.ts';

export interface BrokenLink {
  stream: string;
  revision: number;
  verdictId: string;
  position: number;
  reason: string;
}

export interface ChainReport {
  ok: boolean;
  rows: number;
  streams: number;
  /** Revealed rows whose hash was recomputed from their content. */
  rehashed: number;
  /** Streams whose first row in the file is not the chain's first verdict (the file starts mid-chain). */
  anchored: number;
  firstBroken: BrokenLink | null;
}

/**
 * Walks every market's chain in file order: each row must link to the previous row of its
 * stream, and a revealed row's hash must match its content. Memory: one hash per stream.
 * A file that starts mid-chain (an `after` or `from` export) is anchored at its first row.
 */
export async function verifyRows(rows: AsyncIterable<HistoryRow>): Promise<ChainReport> {
  const last = new Map<string, { hash: string; revision: number }>();
  const report: ChainReport = { ok: true, rows: 0, streams: 0, rehashed: 0, anchored: 0, firstBroken: null };
  const broken = (row: HistoryRow, reason: string) => {
    report.ok = false;
    report.firstBroken = {
      stream: row.stream,
      revision: row.revision,
      verdictId: row.verdict_id,
      position: row.position,
      reason,
    };
  };
  for await (const row of rows) {
    report.rows++;
    const prev = last.get(row.stream);
    if (prev) {
      if (row.revision <= prev.revision) {
        broken(row, `revision ${row.revision} does not follow ${prev.revision}`);
        break;
      }
      if (row.prev_hash !== prev.hash) {
        broken(row, 'prev_hash does not link to the previous verdict of this stream');
        break;
      }
    } else {
      report.streams++;
      if (row.prev_hash !== null) report.anchored++;
    }
    const content = rowContent(row);
    if (content) {
      if (verdictHash(content) !== row.hash) {
        broken(row, 'hash does not match the revealed content');
        break;
      }
      report.rehashed++;
    }
    last.set(row.stream, { hash: row.hash, revision: row.revision });
  }
  return report;
}

/**
 * The track record from labelled rows alone: the service's own fold over the same labels. The
 * risk forecast scored is the one in the row's inputs, which the outcome copied when it resolved
 * (outcomes resolved before outcomes carried it were scored without it by the service).
 */
export async function scoreRows(
  rows: AsyncIterable<HistoryRow>,
  window: TrackRecordWindow,
  asOf: number,
): Promise<TrackRecordResponse> {
  const state: TrackRecordState = {};
  for await (const row of rows) {
    if (row.result === null || row.call === null || row.return_6 === null) continue;
    const served = recordedVolatility(JSON.parse(row.inputs_json ?? '{}'), row.timeframe);
    addPoint(state, {
      exchange: row.exchange,
      timeframe: row.timeframe,
      call: row.call,
      confidence: row.confidence!,
      candleCloseTime: row.candle_close_time!,
      return6: row.return_6,
      result: row.result,
      netCentiBps: row.net_centi_bps,
      price: row.price!,
      return1: row.return_1!,
      return24: row.return_24!,
      volatility: served
        ? {
            horizonCandles: served.horizon_candles,
            expectedMovePct: served.expected_move_pct,
            bandLow: served.band_low,
            bandHigh: served.band_high,
            bandCoverage: served.band_coverage,
          }
        : null,
    });
  }
  return trackRecord(state, window, asOf);
}
