// @ts-check
// A row group of stored export rows (export-rows.ts) made into an Arrow table, on the Parquet
// worker (parquet-worker.mjs) and, when no worker is free, on the main thread (writers.ts).
// Plain JavaScript checked by TypeScript through its JSDoc: a worker thread is loaded by Node
// itself, without the loader that runs the service's TypeScript sources.
import * as arrow from 'apache-arrow';

/**
 * Offsets of a record's parts: a u16 null mask, the u16 end of each string, the strings.
 * @typedef {{ mask: number, ends: number, strings: number }} RecordLayout
 */

/**
 * Where each column's values are read in the records (stored-columns.ts derives it from the
 * column list and the record layouts).
 * @typedef {object} StoredPlan
 * @property {string[]} columns HISTORY_COLUMNS, in order
 * @property {number[]} stringColumn per string column: its index in `columns`
 * @property {number[]} stringK per string column: its string index in its record
 * @property {boolean[]} stringFromOutcome per string column: read from the outcome record
 * @property {boolean[]} stringContent per string column: a verdict's content (null in a commitment)
 * @property {boolean[]} stringTime per string column: ISO 8601 text written as a TIMESTAMP (ms, UTC)
 * @property {number[]} numberColumn per number column: its index in `columns`
 * @property {number[]} numberK per number column: its float64 index in its record
 * @property {boolean[]} numberFromOutcome per number column: read from the outcome record
 * @property {boolean[]} numberContent per number column: a verdict's content (null in a commitment)
 * @property {('float64' | 'int64' | 'int32' | 'timestamp')[]} numberKind per number column: its Arrow type
 * @property {number} positionColumn
 * @property {number} cursorColumn
 * @property {number} revealedColumn
 * @property {RecordLayout} verdict
 * @property {RecordLayout} outcome
 */

/**
 * A row group's records copied into one buffer (stored-columns.ts packs them): transferred to the
 * worker whole instead of as thousands of small buffers.
 * @typedef {object} PackedRows
 * @property {Uint8Array} bytes every record, each starting at a multiple of 8 (its numbers are read as float64s)
 * @property {Int32Array} verdictAt per row: where its verdict record starts
 * @property {Int32Array} outcomeAt per row: where its outcome record starts; -1 = a commitment, -2 = no outcome yet
 * @property {Float64Array} positions per row: its log position
 * @property {Uint8Array} cursorData every row's cursor (ASCII), one after the other
 * @property {Int32Array} cursorOffsets per row and one more: where its cursor starts in cursorData
 */

/**
 * Strings up to this many bytes are copied by a loop: below it, a typed-array view per copy costs
 * more. Measured on 8,192 stored rows: 24 (names, venues and labels by loop; ids, hashes, times by
 * view) 5.6-6.0 ms; 96 (every id and hash by loop) 7.4-7.8 ms; 0 (all by view) 7.6-7.8 ms.
 */
const LOOP_COPY_MAX = 24;
const COMMITMENT = -1;

/**
 * @param {Float64Array} values
 * @param {{ length: number, nullCount: number, nullBitmap?: Uint8Array }} common
 */
function int64Data(values, common, time = false) {
  // Low and high 32-bit words (little-endian, as Arrow lays them out) written as numbers: a
  // BigInt per value cost more than the rest of the column.
  const words = new Int32Array(values.length * 2);
  for (let i = 0; i < values.length; i++) {
    const v = values[i] ?? 0;
    words[2 * i] = v | 0;
    words[2 * i + 1] = Math.floor(v / 4_294_967_296);
  }
  const data = new BigInt64Array(words.buffer);
  // A time: TIMESTAMP(MILLIS, adjusted to UTC) in the Parquet file.
  if (time) return arrow.makeData({ type: new arrow.TimestampMillisecond('UTC'), ...common, data });
  return arrow.makeData({ type: new arrow.Int64(), ...common, data });
}

const DIGIT = 48;
/** `count` decimal digits at `at`; NaN when one is not a digit. */
function digits(/** @type {Uint8Array} */ bytes, /** @type {number} */ at, /** @type {number} */ count) {
  let n = 0;
  for (let i = at; i < at + count; i++) {
    const d = (bytes[i] ?? 0) - DIGIT;
    if (d < 0 || d > 9) return Number.NaN;
    n = n * 10 + d;
  }
  return n;
}

/**
 * Milliseconds of an ISO 8601 time in `bytes[from..to]`: the log's own form
 * (`YYYY-MM-DDTHH:MM:SS.sssZ`, toISOString's) by arithmetic, any other through Date.parse.
 */
function isoMillis(/** @type {Uint8Array} */ bytes, /** @type {number} */ from, /** @type {number} */ to) {
  if (to - from === 24 && bytes[from + 10] === 84 && bytes[from + 23] === 90) {
    const ms = Date.UTC(
      digits(bytes, from, 4),
      digits(bytes, from + 5, 2) - 1,
      digits(bytes, from + 8, 2),
      digits(bytes, from + 11, 2),
      digits(bytes, from + 14, 2),
      digits(bytes, from + 17, 2),
      digits(bytes, from + 20, 3),
    );
    if (!Number.isNaN(ms)) return ms;
  }
  return Date.parse(new TextDecoder().decode(bytes.subarray(from, to)));
}

/**
 * One Arrow table of the plan's columns from packed rows.
 *
 * Row by row, not column by column: a row group's records are megabytes, more than the CPU
 * caches hold, so reading them once per column (31 times) spent most of the time waiting on
 * memory. Two passes over the rows instead: the first reads each record's header (numbers, null
 * mask, string ends) and lays out every column's offsets; the second copies each record's strings
 * into their columns while the record is in cache.
 * @param {PackedRows} packed
 * @param {StoredPlan} plan
 * @returns {arrow.Table}
 */
export function storedTable(packed, plan) {
  const { bytes, verdictAt, outcomeAt, positions } = packed;
  const n = positions.length;
  const f64 = new Float64Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 3);
  const u16 = (/** @type {number} */ at) => (bytes[at] ?? 0) | ((bytes[at + 1] ?? 0) << 8);
  const strings = plan.stringColumn.length;
  const numbers = plan.numberColumn.length;
  /** Per row, per string column: where its bytes start (-1 = null). */
  const starts = new Int32Array(n * strings);
  const offsets = plan.stringColumn.map(() => new Int32Array(n + 1));
  const stringBitmaps = plan.stringColumn.map(() => new Uint8Array((n + 7) >> 3));
  const stringNulls = new Int32Array(strings);
  const values = plan.numberColumn.map(() => new Float64Array(n));
  const numberBitmaps = plan.numberColumn.map(() => new Uint8Array((n + 7) >> 3));
  const numberNulls = new Int32Array(numbers);
  const revealedBits = new Uint8Array((n + 7) >> 3);
  const totals = new Int32Array(strings);
  const stringK = Int32Array.from(plan.stringK);
  const stringFromOutcome = Uint8Array.from(plan.stringFromOutcome, Number);
  const stringContent = Uint8Array.from(plan.stringContent, Number);
  const numberK = Int32Array.from(plan.numberK);
  const numberFromOutcome = Uint8Array.from(plan.numberFromOutcome, Number);
  const numberContent = Uint8Array.from(plan.numberContent, Number);
  const V = plan.verdict;
  const O = plan.outcome;

  for (let i = 0; i < n; i++) {
    const v = verdictAt[i] ?? 0;
    const o = outcomeAt[i] ?? COMMITMENT;
    const revealed = o !== COMMITMENT;
    if (revealed) revealedBits[i >> 3] = (revealedBits[i >> 3] ?? 0) | (1 << (i & 7));
    const bit = 1 << (i & 7);
    const vMask = u16(v + V.mask);
    const oMask = o >= 0 ? u16(o + O.mask) : 0;
    for (let j = 0; j < strings; j++) {
      const k = stringK[j] ?? 0;
      let start = -1;
      let end = 0;
      if (stringFromOutcome[j]) {
        if (o >= 0 && !((oMask >> k) & 1)) {
          start = o + O.strings + (k === 0 ? 0 : u16(o + O.ends + (k - 1) * 2));
          end = o + O.strings + u16(o + O.ends + k * 2);
        }
      } else if (!(stringContent[j] && !revealed) && !((vMask >> k) & 1)) {
        start = v + V.strings + (k === 0 ? 0 : u16(v + V.ends + (k - 1) * 2));
        end = v + V.strings + u16(v + V.ends + k * 2);
      }
      starts[i * strings + j] = start;
      const column = /** @type {Int32Array} */ (offsets[j]);
      if (start < 0) {
        stringNulls[j] = (stringNulls[j] ?? 0) + 1;
      } else {
        const bitmap = /** @type {Uint8Array} */ (stringBitmaps[j]);
        bitmap[i >> 3] = (bitmap[i >> 3] ?? 0) | bit;
        totals[j] = (totals[j] ?? 0) + end - start;
      }
      column[i + 1] = totals[j] ?? 0;
    }
    for (let j = 0; j < numbers; j++) {
      const record = numberFromOutcome[j] ? o : numberContent[j] && !revealed ? -1 : v;
      // NaN is how an outcome record stores null.
      const x = record >= 0 ? (f64[(record >> 3) + (numberK[j] ?? 0)] ?? Number.NaN) : Number.NaN;
      if (Number.isNaN(x)) numberNulls[j] = (numberNulls[j] ?? 0) + 1;
      else {
        /** @type {Float64Array} */ (values[j])[i] = x;
        const bitmap = /** @type {Uint8Array} */ (numberBitmaps[j]);
        bitmap[i >> 3] = (bitmap[i >> 3] ?? 0) | bit;
      }
    }
  }

  // The stored UTF-8 bytes are the column's bytes: no string is made of them.
  const data = plan.stringColumn.map((_, j) => new Uint8Array(totals[j] ?? 0));
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < strings; j++) {
      let from = starts[i * strings + j] ?? -1;
      if (from < 0) continue;
      const out = /** @type {Uint8Array} */ (data[j]);
      const column = /** @type {Int32Array} */ (offsets[j]);
      let to = column[i] ?? 0;
      const end = column[i + 1] ?? 0;
      if (end - to > LOOP_COPY_MAX) out.set(bytes.subarray(from, from + end - to), to);
      else while (to < end) out[to++] = bytes[from++] ?? 0;
    }
  }

  /** @type {arrow.Data[]} */
  const byColumn = new Array(plan.columns.length);
  const common = (
    /** @type {number} */ length,
    /** @type {Uint8Array | undefined} */ bitmap,
    /** @type {number} */ nulls,
  ) => (nulls > 0 ? { length, nullCount: nulls, nullBitmap: bitmap } : { length, nullCount: 0 });
  plan.stringColumn.forEach((c, j) => {
    const shape = common(n, stringBitmaps[j], stringNulls[j] ?? 0);
    const column = /** @type {Uint8Array} */ (data[j]);
    const at = /** @type {Int32Array} */ (offsets[j]);
    if (plan.stringTime[j]) {
      const times = new Float64Array(n);
      for (let i = 0; i < n; i++)
        if ((at[i + 1] ?? 0) > (at[i] ?? 0)) times[i] = isoMillis(column, at[i] ?? 0, at[i + 1] ?? 0);
      byColumn[c] = int64Data(times, shape, true);
      return;
    }
    byColumn[c] = arrow.makeData({ type: new arrow.Utf8(), ...shape, valueOffsets: at, data: column });
  });
  plan.numberColumn.forEach((c, j) => {
    const shape = common(n, numberBitmaps[j], numberNulls[j] ?? 0);
    const column = /** @type {Float64Array} */ (values[j]);
    const kind = plan.numberKind[j];
    if (kind === 'float64')
      byColumn[c] = arrow.makeData({ type: new arrow.Float64(), ...shape, data: column });
    else if (kind === 'int32')
      byColumn[c] = arrow.makeData({ type: new arrow.Int32(), ...shape, data: Int32Array.from(column) });
    else byColumn[c] = int64Data(column, shape, kind === 'timestamp');
  });
  byColumn[plan.positionColumn] = int64Data(positions, { length: n, nullCount: 0 });
  byColumn[plan.cursorColumn] = arrow.makeData({
    type: new arrow.Utf8(),
    length: n,
    nullCount: 0,
    valueOffsets: packed.cursorOffsets,
    data: packed.cursorData,
  });
  byColumn[plan.revealedColumn] = arrow.makeData({
    type: new arrow.Bool(),
    length: n,
    nullCount: 0,
    data: revealedBits,
  });
  /** @type {Record<string, arrow.Vector>} */
  const columns = {};
  plan.columns.forEach((name, c) => {
    columns[name] = arrow.makeVector(/** @type {arrow.Data} */ (byColumn[c]));
  });
  return new arrow.Table(columns);
}
