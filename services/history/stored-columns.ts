import * as arrow from 'apache-arrow';
import { HISTORY_COLUMNS, type HistoryRow } from '../../contracts/history.ts';
import {
  OUTCOME_LAYOUT,
  OUTCOME_NUMBERS,
  OUTCOME_STRINGS,
  outcomeNumber,
  stringEnd,
  stringStart,
  VERDICT_LAYOUT,
  VERDICT_NUMBERS,
  VERDICT_STRINGS,
  verdictNumber,
} from './export-rows.ts';

/**
 * A row for the Parquet writer as stored bytes (export-rows.ts): the verdict's record and the
 * label the reveal rule gave it at the scan's clock (`shownStoredLabel`: false = commitment only).
 */
export interface StoredRef {
  position: number;
  v: Buffer;
  label: Buffer | null | false;
}

type Source =
  | { from: 'verdict'; kind: 'utf8' | 'float64' | 'int64' | 'int32'; k: number; content: boolean }
  | { from: 'outcome'; kind: 'utf8' | 'float64' | 'int64'; k: number }
  | { from: 'position' | 'revealed' };

/** Columns a commitment shows: the chain fields, and the market the stream name already states. */
const COMMITMENT: ReadonlySet<keyof HistoryRow> = new Set([
  'verdict_id',
  'stream',
  'revision',
  'recorded_at',
  'exchange',
  'coin',
  'timeframe',
  'hash',
  'prev_hash',
  'reveal_at',
]);
const NUMBER_KIND: Partial<Record<keyof HistoryRow, 'int64' | 'int32' | 'float64'>> = {
  revision: 'int64',
  confidence: 'int32',
  candle_close_time: 'int64',
  net_centi_bps: 'int64',
};
const VERDICT_NUMBER_OF: Partial<Record<keyof HistoryRow, (typeof VERDICT_NUMBERS)[number]>> = {
  revision: 'revision',
  confidence: 'confidence',
  score: 'score',
  price: 'price',
  candle_close_time: 'candleCloseTime',
};

/** Where each column of HISTORY_COLUMNS comes from in the stored records. */
const SOURCES: Source[] = HISTORY_COLUMNS.map((name): Source => {
  if (name === 'position') return { from: 'position' };
  if (name === 'revealed') return { from: 'revealed' };
  const content = !COMMITMENT.has(name);
  const vs = (VERDICT_STRINGS as readonly string[]).indexOf(name);
  if (vs >= 0) return { from: 'verdict', kind: 'utf8', k: vs, content };
  const vn = VERDICT_NUMBER_OF[name];
  if (vn) {
    const k = (VERDICT_NUMBERS as readonly string[]).indexOf(vn);
    return { from: 'verdict', kind: NUMBER_KIND[name] ?? 'float64', k, content };
  }
  const os = (OUTCOME_STRINGS as readonly string[]).indexOf(name);
  if (os >= 0) return { from: 'outcome', kind: 'utf8', k: os };
  const on = (OUTCOME_NUMBERS as readonly string[]).indexOf(name);
  if (on >= 0) return { from: 'outcome', kind: NUMBER_KIND[name] === 'int64' ? 'int64' : 'float64', k: on };
  throw new Error(`history column ${name} has no stored source`);
});

/**
 * The record a row's column `source` reads, or null where the row shows null: content columns
 * of a commitment, outcome columns without an attached outcome (the reveal rule, applied here
 * to every column from the label the scan computed).
 */
function recordOf(ref: StoredRef, source: Source): Buffer | null {
  if (source.from === 'outcome') return ref.label || null;
  if (source.from === 'verdict' && source.content && ref.label === false) return null;
  return ref.v;
}

function utf8(refs: readonly StoredRef[], source: Source & { k: number }): arrow.Data {
  const n = refs.length;
  const offsets = new Int32Array(n + 1);
  const starts = new Int32Array(n);
  const bitmap = new Uint8Array((n + 7) >> 3);
  const layout = source.from === 'outcome' ? OUTCOME_LAYOUT : VERDICT_LAYOUT;
  const k = source.k;
  let nulls = 0;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const record = recordOf(refs[i]!, source);
    const start = record ? stringStart(record, layout, k) : -1;
    starts[i] = start;
    if (start < 0) nulls++;
    else {
      total += stringEnd(record!, layout, k) - start;
      bitmap[i >> 3]! |= 1 << (i & 7);
    }
    offsets[i + 1] = total;
  }
  // The stored UTF-8 bytes are the column's bytes: no string is made of them. (Copying a byte at
  // a time in JS measured slower than Buffer#copy, whose per-call checks are still about a sixth
  // of a Parquet export's CPU.)
  const data = Buffer.allocUnsafe(total);
  for (let i = 0; i < n; i++) {
    const start = starts[i]!;
    if (start < 0) continue;
    const to = offsets[i]!;
    recordOf(refs[i]!, source)!.copy(data, to, start, start + offsets[i + 1]! - to);
  }
  return arrow.makeData({
    type: new arrow.Utf8(),
    length: n,
    nullCount: nulls,
    nullBitmap: nulls > 0 ? bitmap : undefined,
    valueOffsets: offsets,
    data,
  });
}

function numbers(refs: readonly StoredRef[], source: Source): arrow.Data {
  const n = refs.length;
  const values = new Float64Array(n);
  const bitmap = new Uint8Array((n + 7) >> 3);
  let nulls = 0;
  for (let i = 0; i < n; i++) {
    const ref = refs[i]!;
    let x: number;
    if (source.from === 'position') x = ref.position;
    else {
      const record = recordOf(ref, source);
      const k = (source as { k: number }).k;
      // NaN is how an outcome record stores null.
      x = record ? (source.from === 'outcome' ? outcomeNumber : verdictNumber)(record, k) : Number.NaN;
    }
    if (Number.isNaN(x)) nulls++;
    else {
      values[i] = x;
      bitmap[i >> 3]! |= 1 << (i & 7);
    }
  }
  const common = { length: n, nullCount: nulls, nullBitmap: nulls > 0 ? bitmap : undefined };
  const kind = source.from === 'position' ? 'int64' : (source as { kind: string }).kind;
  if (kind === 'float64') return arrow.makeData({ type: new arrow.Float64(), ...common, data: values });
  if (kind === 'int32') {
    return arrow.makeData({ type: new arrow.Int32(), ...common, data: Int32Array.from(values) });
  }
  // Low and high 32-bit words, as writers.ts lays int64 out.
  const words = new Int32Array(n * 2);
  for (let i = 0; i < n; i++) {
    const v = values[i]!;
    words[2 * i] = v | 0;
    words[2 * i + 1] = Math.floor(v / 4_294_967_296);
  }
  return arrow.makeData({ type: new arrow.Int64(), ...common, data: new BigInt64Array(words.buffer) });
}

function revealed(refs: readonly StoredRef[]): arrow.Data {
  const n = refs.length;
  const bits = new Uint8Array((n + 7) >> 3);
  for (let i = 0; i < n; i++) if (refs[i]!.label !== false) bits[i >> 3]! |= 1 << (i & 7);
  return arrow.makeData({ type: new arrow.Bool(), length: n, nullCount: 0, data: bits });
}

/** One Arrow table of HISTORY_COLUMNS from stored rows: the same values `fillColumns` gives. */
export function storedTable(refs: readonly StoredRef[]): arrow.Table {
  const columns: Record<string, arrow.Vector> = {};
  HISTORY_COLUMNS.forEach((name, c) => {
    const source = SOURCES[c]!;
    let data: arrow.Data;
    if (source.from === 'revealed') data = revealed(refs);
    else if ('kind' in source && source.kind === 'utf8') data = utf8(refs, source);
    else data = numbers(refs, source);
    columns[name] = arrow.makeVector(data);
  });
  return new arrow.Table(columns);
}
