import * as arrow from 'apache-arrow';
import { HISTORY_COLUMNS, type HistoryRow } from '../../contracts/history.ts';
import {
  OUTCOME_LAYOUT,
  OUTCOME_NUMBERS,
  OUTCOME_STRINGS,
  VERDICT_LAYOUT,
  VERDICT_NUMBERS,
  VERDICT_STRINGS,
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

/** A string or number column and where its values are read. */
interface ColumnPlan {
  c: number;
  source: Source & { k: number };
}

const STRING_COLUMNS: ColumnPlan[] = [];
const NUMBER_COLUMNS: ColumnPlan[] = [];
SOURCES.forEach((source, c) => {
  if (!('k' in source)) return;
  (source.kind === 'utf8' ? STRING_COLUMNS : NUMBER_COLUMNS).push({ c, source });
});

/** Per column, as flat arrays the row loop reads without a property lookup per value. */
const STRING_K = Int32Array.from(STRING_COLUMNS, ({ source }) => source.k);
const STRING_FROM_OUTCOME = Uint8Array.from(STRING_COLUMNS, ({ source }) =>
  source.from === 'outcome' ? 1 : 0,
);
const STRING_CONTENT = Uint8Array.from(STRING_COLUMNS, ({ source }) =>
  source.from === 'verdict' && source.content ? 1 : 0,
);
const NUMBER_K = Int32Array.from(NUMBER_COLUMNS, ({ source }) => source.k);
const NUMBER_FROM_OUTCOME = Uint8Array.from(NUMBER_COLUMNS, ({ source }) =>
  source.from === 'outcome' ? 1 : 0,
);
const NUMBER_CONTENT = Uint8Array.from(NUMBER_COLUMNS, ({ source }) =>
  source.from === 'verdict' && source.content ? 1 : 0,
);

/** Strings up to this many bytes are copied by a loop: below it, Buffer#copy's per-call view costs more. */
const LOOP_COPY_MAX = 96;

const u16 = (r: Buffer, at: number): number => r[at]! | (r[at + 1]! << 8);

function int64Data(values: Float64Array, common: object): arrow.Data {
  // Low and high 32-bit words, as writers.ts lays int64 out.
  const words = new Int32Array(values.length * 2);
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    words[2 * i] = v | 0;
    words[2 * i + 1] = Math.floor(v / 4_294_967_296);
  }
  return arrow.makeData({ type: new arrow.Int64(), ...common, data: new BigInt64Array(words.buffer) });
}

/**
 * One Arrow table of HISTORY_COLUMNS from stored rows: the same values `fillColumns` gives.
 *
 * Row by row, not column by column: a row group's records are thousands of separate ~1 KB
 * buffers, more than the CPU caches hold, so reading them once per column (31 times) spent most
 * of the time waiting on memory. Two passes over the rows instead: the first reads each record's
 * header (numbers, null mask, string ends) and lays out every column's offsets; the second copies
 * each record's strings into their columns while the record is in cache.
 */
export function storedTable(refs: readonly StoredRef[]): arrow.Table {
  const n = refs.length;
  const strings = STRING_COLUMNS.length;
  const numbers = NUMBER_COLUMNS.length;
  /** Per row, per string column: where its bytes start in the row's record (-1 = null). */
  const starts = new Int32Array(n * strings);
  const offsets = STRING_COLUMNS.map(() => new Int32Array(n + 1));
  const stringBitmaps = STRING_COLUMNS.map(() => new Uint8Array((n + 7) >> 3));
  const stringNulls = new Int32Array(strings);
  const values = NUMBER_COLUMNS.map(() => new Float64Array(n));
  const numberBitmaps = NUMBER_COLUMNS.map(() => new Uint8Array((n + 7) >> 3));
  const numberNulls = new Int32Array(numbers);
  const positions = new Float64Array(n);
  const revealedBits = new Uint8Array((n + 7) >> 3);
  const totals = new Int32Array(strings);

  const vStrings = VERDICT_LAYOUT.strings;
  const oStrings = OUTCOME_LAYOUT.strings;
  for (let i = 0; i < n; i++) {
    const ref = refs[i]!;
    const v = ref.v;
    const label = ref.label;
    const outcome = label || null;
    positions[i] = ref.position;
    if (label !== false) revealedBits[i >> 3]! |= 1 << (i & 7);
    const bit = 1 << (i & 7);
    const vMask = u16(v, VERDICT_LAYOUT.mask);
    const oMask = outcome ? u16(outcome, OUTCOME_LAYOUT.mask) : 0;
    for (let j = 0; j < strings; j++) {
      const k = STRING_K[j]!;
      let start = -1;
      if (STRING_FROM_OUTCOME[j]) {
        if (outcome && !((oMask >> k) & 1)) {
          start = oStrings + (k === 0 ? 0 : u16(outcome, OUTCOME_LAYOUT.ends + (k - 1) * 2));
          totals[j]! += oStrings + u16(outcome, OUTCOME_LAYOUT.ends + k * 2) - start;
        }
      } else if (!(STRING_CONTENT[j] && label === false) && !((vMask >> k) & 1)) {
        start = vStrings + (k === 0 ? 0 : u16(v, VERDICT_LAYOUT.ends + (k - 1) * 2));
        totals[j]! += vStrings + u16(v, VERDICT_LAYOUT.ends + k * 2) - start;
      }
      starts[i * strings + j] = start;
      if (start < 0) stringNulls[j]!++;
      else stringBitmaps[j]![i >> 3]! |= bit;
      offsets[j]![i + 1] = totals[j]!;
    }
    for (let j = 0; j < numbers; j++) {
      const record = NUMBER_FROM_OUTCOME[j] ? outcome : NUMBER_CONTENT[j] && label === false ? null : v;
      // NaN is how an outcome record stores null.
      const x = record ? record.readDoubleLE(NUMBER_K[j]! * 8) : Number.NaN;
      if (Number.isNaN(x)) numberNulls[j]!++;
      else {
        values[j]![i] = x;
        numberBitmaps[j]![i >> 3]! |= bit;
      }
    }
  }

  // The stored UTF-8 bytes are the column's bytes: no string is made of them. Node's Buffer#copy
  // makes a Uint8Array view of the source per call, which costs more than the copy for the short
  // strings most columns hold (ids, hashes, names), so those are copied by a loop.
  const data = STRING_COLUMNS.map((_, j) => Buffer.allocUnsafe(totals[j]!));
  for (let i = 0; i < n; i++) {
    const { v, label } = refs[i]!;
    for (let j = 0; j < strings; j++) {
      let from = starts[i * strings + j]!;
      if (from < 0) continue;
      const record = STRING_FROM_OUTCOME[j] ? (label as Buffer) : v;
      const out = data[j]!;
      let to = offsets[j]![i]!;
      const end = offsets[j]![i + 1]!;
      if (end - to > LOOP_COPY_MAX) record.copy(out, to, from, from + end - to);
      else while (to < end) out[to++] = record[from++]!;
    }
  }

  const byColumn = new Array<arrow.Data>(HISTORY_COLUMNS.length);
  const common = (length: number, bitmap: Uint8Array, nulls: number) => ({
    length,
    nullCount: nulls,
    nullBitmap: nulls > 0 ? bitmap : undefined,
  });
  STRING_COLUMNS.forEach(({ c }, j) => {
    byColumn[c] = arrow.makeData({
      type: new arrow.Utf8(),
      ...common(n, stringBitmaps[j]!, stringNulls[j]!),
      valueOffsets: offsets[j]!,
      data: data[j]!,
    });
  });
  NUMBER_COLUMNS.forEach(({ c, source }, j) => {
    const shape = common(n, numberBitmaps[j]!, numberNulls[j]!);
    const kind = (source as { kind: string }).kind;
    if (kind === 'float64')
      byColumn[c] = arrow.makeData({ type: new arrow.Float64(), ...shape, data: values[j]! });
    else if (kind === 'int32')
      byColumn[c] = arrow.makeData({ type: new arrow.Int32(), ...shape, data: Int32Array.from(values[j]!) });
    else byColumn[c] = int64Data(values[j]!, shape);
  });
  SOURCES.forEach((source, c) => {
    if (source.from === 'position') byColumn[c] = int64Data(positions, { length: n, nullCount: 0 });
    if (source.from === 'revealed')
      byColumn[c] = arrow.makeData({ type: new arrow.Bool(), length: n, nullCount: 0, data: revealedBits });
  });
  const columns: Record<string, arrow.Vector> = {};
  HISTORY_COLUMNS.forEach((name, c) => {
    columns[name] = arrow.makeVector(byColumn[c]!);
  });
  return new arrow.Table(columns);
}
