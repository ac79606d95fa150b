import { Readable } from 'node:stream';
import * as arrow from 'apache-arrow';
import * as parquet from 'parquet-wasm/node';
import { HISTORY_COLUMNS, type HistoryFormat, type HistoryRow } from '../../contracts/history.ts';
import { csvField } from '../shared/csv.ts';
import {
  NO_OUTCOME_TAIL,
  StoredLine,
  shownStoredLabel,
  storedOutcome,
  storedVerdict,
  tailOf,
} from './export-rows.ts';
import { type ParquetEncoders, type ParquetSettings, sharedParquetEncoders } from './parquet-encoders.ts';
import { enqueueRowGroup, type RowGroup, writerProperties } from './parquet-input.mjs';
import { fillColumns, historyRow, rowRef } from './rows.ts';
import type { RowMaker, StoredMaker } from './scan.ts';
import { packRows, STORED_PLAN, type StoredRef } from './stored-columns.ts';

/**
 * Serialisers for history rows. Each pulls batches of rows from an async iterable only as fast
 * as the returned stream is read (Readable.from and a pull-based web stream), so a slow client
 * holds a batch or two in memory, never the range it asked for.
 */

/**
 * Parquet row groups of 8,192 rows, one size per file (parquet-wasm's streaming writer has no
 * growing size): each row group carries per-column metadata and page headers for all 31
 * columns, so 1,024-row groups spent a quarter of the encoder's time on that overhead. A Parquet
 * file is read from its footer, so a client gains nothing from an earlier first row group.
 */
const ROW_GROUP_ROWS = 8_192;
/**
 * Rows handed to the writer at a time when an export is encoded on the calling thread (encoders
 * null or closed, or all busy with `whenBusy: 'here'`): a whole row group there was one
 * synchronous block of tens of milliseconds or more (full inputs), which every other request
 * waited behind. encodeHere lets the event loop turn before each slice; the writer still closes a
 * row group every ROW_GROUP_ROWS rows, so the file is the same bytes as a worker's.
 */
const HERE_BATCH_ROWS = 1_024;
/**
 * Bytes per NDJSON write: fewer, larger writes to the socket. 512 KB took 6-8 % less CPU a row
 * than 128 KB over an export through HTTP (200,000 and 1M rows, same process, alternated).
 */
const NDJSON_CHUNK = 512 * 1024;
const TEXT_CHUNK = 64 * 1024;
/**
 * Columns whose values repeat (a few venues, coins, timeframes, labels): dictionary-encoded.
 * The rest (ids, hashes, times, inputs, numbers) are nearly all distinct, where a dictionary
 * only costs hashing every value before the writer falls back to plain encoding.
 */
const DICTIONARY_COLUMNS: readonly (keyof HistoryRow)[] = [
  'stream',
  'exchange',
  'coin',
  'timeframe',
  'call',
  'regime',
  'feed',
  'engine_version',
  'trigger',
  'result',
];

/**
 * Columns of random hex (ids, hashes): Snappy finds nothing to compress in them, and trying was
 * about 40 % of the encoder's time; the file is 3 % larger without it.
 */
const UNCOMPRESSED_COLUMNS: readonly (keyof HistoryRow)[] = [
  'verdict_id',
  'hash',
  'prev_hash',
  'outcome_id',
  'outcome_hash',
  'outcome_prev_hash',
];

/**
 * Columns whose min/max statistics no reader can prune by (random hex, the inputs' JSON): left
 * out, the encoder spends 8 % less time on a row group (8,192 rows: 9.2-9.4 -> 8.5-8.6 ms). Times,
 * venues, coins and numbers keep theirs, so DuckDB still skips row groups by them.
 */
const WITHOUT_STATISTICS: readonly (keyof HistoryRow)[] = [...UNCOMPRESSED_COLUMNS, 'inputs_json'];

type Batches<T = HistoryRow> = AsyncIterable<T[]> | Iterable<T[]>;

/** A row to write: built from the events, or a revealed row's stored bytes (export-rows.ts). */
export type NdjsonItem = HistoryRow | StoredLine;

/**
 * `trailer`: the last line's content, when the caller asked for one; null: rows only. `sent`: the
 * bytes the stream's reader was handed have all left the process (an HTTP answer's are with the
 * kernel: `writableLength` 0); with it, a chunk already sent is written again instead of a new one.
 */
function ndjsonStream(
  batches: Batches<NdjsonItem>,
  trailer: (() => object) | null,
  sent?: () => boolean,
): Readable {
  /** The last chunk given to the reader, and one it is known to be done with (written again next). */
  let given: Buffer | null = null;
  let spare: Buffer | null = null;
  /**
   * The next chunk to fill, `done` the one just given. Fresh memory costs more to write into than
   * a chunk written before: writing each line into a new 512 KB chunk took about a fifth more CPU
   * a row than into one reused (cold pages, and the socket then reads them from memory again).
   */
  const next = (done: Buffer): Buffer => {
    given = done;
    if (spare === null) return Buffer.allocUnsafe(NDJSON_CHUNK);
    const chunk = spare;
    spare = null;
    return chunk;
  };
  async function* write(): AsyncGenerator<Buffer> {
    // Lines are encoded straight into byte chunks: no 64 KB string per chunk (built from the
    // lines, flattened, then encoded again by the socket) that sat in the young generation,
    // copied by every collection, while the socket's backpressure held it. A chunk's bytes
    // live outside the JS heap.
    let chunk: Buffer = Buffer.allocUnsafe(NDJSON_CHUNK);
    let at = 0;
    let first = true;
    for await (const rows of batches) {
      // The scan lets the event loop turn between batches, so the socket has written what it
      // could: with nothing left in this stream's buffer nor in the answer's, every chunk given
      // so far is with the kernel (a chunk that is not, even in part, is left to the collector).
      if (given !== null && sent?.() === true && lines.readableLength === 0) {
        spare = given;
        given = null;
      }
      for (const row of rows) {
        if (row instanceof StoredLine) {
          // Written from the stored bytes (the head's template, its columns, the tail): no
          // string is made of them.
          const size = row.byteLength;
          if (at + size > NDJSON_CHUNK && at > 0) {
            yield chunk.subarray(0, at);
            chunk = next(chunk);
            at = 0;
          }
          if (size > NDJSON_CHUNK) {
            yield row.toBuffer();
            continue;
          }
          at = row.writeTo(chunk, at);
          continue;
        }
        const line = JSON.stringify(row);
        // At most 3 bytes per UTF-16 unit, and the line break.
        const most = 3 * line.length + 1;
        if (at + most > NDJSON_CHUNK && at > 0) {
          yield chunk.subarray(0, at);
          chunk = next(chunk);
          at = 0;
        }
        if (most > NDJSON_CHUNK) {
          yield Buffer.from(`${line}\n`);
          continue;
        }
        at += chunk.write(line, at);
        chunk[at++] = 10;
      }
      // The first batch goes out at once, whatever its size: a client sees data at once.
      if (first && at > 0) {
        yield chunk.subarray(0, at);
        chunk = next(chunk);
        at = 0;
      }
      first = false;
    }
    const last = trailer ? Buffer.from(`${JSON.stringify(trailer())}\n`) : null;
    if (last) yield Buffer.concat([chunk.subarray(0, at), last]);
    else if (at > 0) yield chunk.subarray(0, at);
  }
  const lines = Readable.from(write(), { objectMode: false });
  return lines;
}

export function csvLine(row: HistoryRow): string {
  return `${HISTORY_COLUMNS.map((c) => csvField(row[c])).join(',')}\n`;
}

export const CSV_HEADER = `${HISTORY_COLUMNS.join(',')}\n`;

function csvStream(batches: Batches): Readable {
  return Readable.from(
    (async function* () {
      let chunk = CSV_HEADER;
      for await (const rows of batches) {
        for (const row of rows) {
          chunk += csvLine(row);
          // A string past ~128 KB is allocated in V8's large-object space, which only a full
          // collection frees.
          if (chunk.length >= TEXT_CHUNK) {
            yield chunk;
            chunk = '';
          }
        }
      }
      if (chunk) yield chunk;
    })(),
    { objectMode: false },
  );
}

/**
 * The Parquet type of each column. `timestamp`: TIMESTAMP(MILLIS, adjusted to UTC), which DuckDB
 * reads as TIMESTAMP WITH TIME ZONE and hyparquet as a Date; the row holds the time as ISO 8601
 * text (recorded_at, reveal_at) or Unix milliseconds (candle_close_time), as JSON and CSV write it.
 */
export type Kind = 'utf8' | 'int64' | 'int32' | 'float64' | 'bool' | 'timestamp';
export const KINDS: Record<keyof HistoryRow, Kind> = {
  position: 'int64',
  verdict_id: 'utf8',
  stream: 'utf8',
  revision: 'int64',
  recorded_at: 'timestamp',
  exchange: 'utf8',
  coin: 'utf8',
  timeframe: 'utf8',
  hash: 'utf8',
  prev_hash: 'utf8',
  reveal_at: 'timestamp',
  revealed: 'bool',
  call: 'utf8',
  confidence: 'int32',
  score: 'float64',
  regime: 'utf8',
  price: 'float64',
  candle_close_time: 'timestamp',
  feed: 'utf8',
  engine_version: 'utf8',
  trigger: 'utf8',
  inputs_json: 'utf8',
  outcome_id: 'utf8',
  return_1: 'float64',
  return_6: 'float64',
  return_24: 'float64',
  result: 'utf8',
  net_centi_bps: 'int64',
  mae_bps: 'float64',
  mfe_bps: 'float64',
  realised_vol: 'float64',
  lean: 'utf8',
  lean_net_centi_bps: 'int64',
  outcome_hash: 'utf8',
  outcome_prev_hash: 'utf8',
  outcome_position: 'int64',
  cursor: 'utf8',
};

/**
 * Splits rows into one array per column (HISTORY_COLUMNS order). Generated once from the column
 * list so each read is a named property load on rows of one shape; `row[name]` with the name
 * changing per column is a megamorphic lookup, and was a third of the Parquet path's time.
 */
export const splitColumns = new Function(
  'rows',
  'columns',
  'at',
  `${HISTORY_COLUMNS.map((_c, k) => `const c${k} = columns[${k}];`).join('\n')}
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i];
    ${HISTORY_COLUMNS.map((c, k) => `c${k}[at + i] = r[${JSON.stringify(c)}];`).join('\n')}
  }`,
) as (rows: readonly HistoryRow[], columns: unknown[][], at: number) => void;

/** Validity bitmap (1 = present) of a column, and how many are null. */
function validity(values: readonly unknown[]): { bitmap: Uint8Array; nulls: number } {
  const bitmap = new Uint8Array((values.length + 7) >> 3);
  let nulls = 0;
  for (let i = 0; i < values.length; i++) {
    if (values[i] === null) nulls++;
    else bitmap[i >> 3]! |= 1 << (i & 7);
  }
  return { bitmap, nulls };
}

/**
 * Columns are laid out by hand rather than through Arrow's per-value builders: a string column
 * is encoded as one UTF-8 buffer (one native call, not one TextEncoder call per value), numbers
 * are written straight into typed arrays.
 */
function column(kind: Kind, values: unknown[]): arrow.Data {
  const length = values.length;
  const { bitmap, nulls } = validity(values);
  const common = { length, nullCount: nulls, nullBitmap: nulls > 0 ? bitmap : undefined };
  switch (kind) {
    case 'utf8': {
      const strings = values as (string | null)[];
      // join() writes null as the empty string: the offsets below skip it the same way.
      const joined = strings.join('');
      const data = Buffer.from(joined, 'utf8');
      const ascii = data.length === joined.length;
      const valueOffsets = new Int32Array(length + 1);
      let at = 0;
      for (let i = 0; i < length; i++) {
        const v = strings[i];
        if (v !== null && v !== undefined) at += ascii ? v.length : Buffer.byteLength(v);
        valueOffsets[i + 1] = at;
      }
      return arrow.makeData({ type: new arrow.Utf8(), ...common, valueOffsets, data });
    }
    case 'float64': {
      const data = new Float64Array(length);
      for (let i = 0; i < length; i++) if (values[i] !== null) data[i] = values[i] as number;
      return arrow.makeData({ type: new arrow.Float64(), ...common, data });
    }
    case 'int32': {
      const data = new Int32Array(length);
      for (let i = 0; i < length; i++) if (values[i] !== null) data[i] = values[i] as number;
      return arrow.makeData({ type: new arrow.Int32(), ...common, data });
    }
    case 'int64':
    case 'timestamp': {
      // Low and high 32-bit words (little-endian, as Arrow lays them out) written as numbers:
      // a BigInt per value cost more than the rest of the column.
      const words = new Int32Array(length * 2);
      for (let i = 0; i < length; i++) {
        const v = values[i];
        if (v === null) continue;
        // A time is milliseconds, or the row's ISO 8601 text of them.
        const n = typeof v === 'string' ? Date.parse(v) : (v as number);
        words[2 * i] = n | 0;
        words[2 * i + 1] = Math.floor(n / 4_294_967_296);
      }
      const data = new BigInt64Array(words.buffer);
      if (kind === 'timestamp')
        return arrow.makeData({ type: new arrow.TimestampMillisecond('UTC'), ...common, data });
      return arrow.makeData({ type: new arrow.Int64(), ...common, data });
    }
    case 'bool': {
      const data = new Uint8Array((length + 7) >> 3);
      for (let i = 0; i < length; i++) if (values[i] === true) data[i >> 3]! |= 1 << (i & 7);
      return arrow.makeData({ type: new arrow.Bool(), ...common, data });
    }
  }
}

/**
 * Writes a batch into one array per column (HISTORY_COLUMNS order) from index `at`: from rows, or
 * from the events (fillColumns).
 */
type Fill<T> = (items: readonly T[], columns: unknown[][], at: number) => void;

function batchTable(values: unknown[][]): arrow.Table {
  const columns: Record<string, arrow.Vector> = {};
  HISTORY_COLUMNS.forEach((name, k) => {
    columns[name] = arrow.makeVector(column(KINDS[name], values[k]!));
  });
  return new arrow.Table(columns);
}

/** How the history's Parquet files are written: one set for every export (and the encoder workers). */
export const HISTORY_PARQUET_SETTINGS: ParquetSettings = {
  rowGroupRows: ROW_GROUP_ROWS,
  dictionary: DICTIONARY_COLUMNS,
  uncompressed: UNCOMPRESSED_COLUMNS,
  withoutStatistics: WITHOUT_STATISTICS,
  stored: STORED_PLAN,
};

/** Parquet via the Rust writer (parquet-wasm), streamed row group by row group as it is written. */
export function parquetStream(batches: Batches): Readable;
export function parquetStream<T>(
  batches: Batches<T>,
  fill?: Fill<T>,
  build?: (columns: unknown[][]) => RowGroup,
  encoders?: ParquetEncoders | null,
): Readable;
export function parquetStream<T>(
  batches: Batches<T>,
  fill: Fill<T> = splitColumns as unknown as Fill<T>,
  build: (columns: unknown[][]) => RowGroup = (columns) => ({
    ipc: arrow.tableToIPC(batchTable(columns), 'stream'),
  }),
  encoders: ParquetEncoders | null = sharedParquetEncoders(),
): Readable {
  const iterator =
    Symbol.asyncIterator in batches ? batches[Symbol.asyncIterator]() : batches[Symbol.iterator]();
  let done = false;
  /**
   * The row group being filled, as columns: each page is taken apart as it arrives, so the
   * group holds its values, not a group's worth of pages of decoded events (those outlived
   * young-generation collections and were promoted, to be swept later at a higher cost).
   */
  /** Rows per hand-over to the writer: a row group on a worker, a slice of one here (HERE_BATCH_ROWS). */
  let batchRows = ROW_GROUP_ROWS;
  let columns = HISTORY_COLUMNS.map(() => new Array<unknown>(batchRows));
  let filled = 0;
  let carry: T[] = [];
  let sentLast = false;
  let groups = 0;
  /** The next row group; null once the last one has been given. */
  const nextRowGroup = async (): Promise<RowGroup | null> => {
    if (sentLast) return null;
    while (filled < batchRows) {
      let items = carry;
      carry = [];
      if (items.length === 0) {
        const next = await iterator.next();
        if (next.done) {
          done = true;
          break;
        }
        items = next.value;
      }
      // Whole batches go to the writer; what is over starts the next one.
      const room = batchRows - filled;
      if (items.length > room) {
        carry = items.slice(room);
        items = items.slice(0, room);
      }
      fill(items, columns, filled);
      filled += items.length;
    }
    // An empty export is still a valid file with the full schema: one empty row group is given.
    if (filled === 0 && groups > 0) return null;
    for (const values of columns) values.length = filled;
    const group = build(columns);
    columns = HISTORY_COLUMNS.map(() => new Array<unknown>(batchRows));
    filled = 0;
    groups++;
    if (done) sentLast = true;
    return group;
  };
  const cancel = async () => {
    await iterator.return?.();
  };
  const settings = HISTORY_PARQUET_SETTINGS;
  const onWorker = encoders?.encode(settings, nextRowGroup, cancel);
  if (onWorker) return onWorker;
  batchRows = HERE_BATCH_ROWS;
  columns = HISTORY_COLUMNS.map(() => new Array<unknown>(batchRows));
  return encodeHere(settings, nextRowGroup, cancel);
}

/** The same encoding on this thread: for `encoders: null`, once they are closed, or busy with `whenBusy: 'here'`. */
function encodeHere(
  settings: ParquetSettings,
  next: () => Promise<RowGroup | null>,
  cancel: () => Promise<void>,
): Readable {
  const recordBatches = new ReadableStream({
    async pull(controller) {
      // Building a batch and encoding it are one unbroken chain of promise jobs; letting the event
      // loop turn first lets the bytes already written leave before the next batch is built.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const group = await next();
      if (group === null) {
        controller.close();
        return;
      }
      enqueueRowGroup(controller, group, settings.stored);
    },
    cancel,
  });
  const properties = writerProperties(settings);
  return Readable.from(
    (async function* () {
      const bytes = await parquet.transformParquetStream(recordBatches, properties);
      const reader = bytes.getReader();
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) return;
        yield Buffer.from(value as Uint8Array);
      }
    })(),
    // Byte mode: Readable.from defaults to object mode, which buffers 16 chunks (here up to 16
    // encoded row groups) ahead of the socket.
    { objectMode: false },
  );
}

/**
 * The batches of a scan, each verdict made into what the format writes (scanHistory's `make`);
 * a format that can write stored rows' bytes also passes `fromStore`.
 */
export type RowSource = <T>(make: RowMaker<T>, fromStore?: StoredMaker<T>) => Batches<T>;

/**
 * NDJSON writes a revealed row from its stored head template and tail; a commitment is made from
 * its event. `spent`: ndjsonStream copies a batch's lines into its chunk before it asks for the
 * next batch.
 */
export const storedLines: StoredMaker<NdjsonItem> = {
  commitments: false,
  spent: true,
  make: (position, v, label) => new StoredLine(v, label ? tailOf(label) : NO_OUTCOME_TAIL, null, position),
};

/** Parquet takes every row as stored bytes, commitments included (stored-columns.ts). */
const storedRefs: StoredMaker<StoredRef> = {
  commitments: true,
  make: (position, v, label) => ({ position, v, label }),
};
/** Rows past what the store holds (the log's tail) are put in the same stored form. */
const refFromEvents: RowMaker<StoredRef> = (verdict, outcome, now) => {
  const v = storedVerdict(verdict);
  return {
    position: verdict.position,
    v,
    label: shownStoredLabel(v, outcome && storedOutcome(outcome), now),
  };
};
const fillRefs = (items: readonly StoredRef[], columns: unknown[][], at: number) => {
  const refs = columns[0]!;
  for (let j = 0; j < items.length; j++) refs[at + j] = items[j];
};
/** Packed into one buffer; the encoder lays out the columns (on its worker when it has one). */
const buildFromRefs = (columns: unknown[][]): RowGroup => ({ packed: packRows(columns[0] as StoredRef[]) });

/** Parquet of stored rows (a row's record and the label the reveal rule gave it). */
export function storedParquetStream(
  batches: Batches<StoredRef>,
  encoders: ParquetEncoders | null = sharedParquetEncoders(),
): Readable {
  return parquetStream(batches, fillRefs, buildFromRefs, encoders);
}

/** A Parquet answer whose first rows are read: `stream` encodes it, `cancel` closes its scan unsent. */
export interface ReadyParquet {
  stream(): Readable;
  cancel(): Promise<void>;
}

/**
 * A history export's Parquet answer, given once its scan has read its first rows, or has ended with
 * none (a long poll's wait is over then): only `stream` asks for an encoder worker. A long poll
 * waiting for rows held a worker the whole wait (up to HISTORY_MAX_WAIT_S), so one key's long polls
 * could hold every worker in the process while other keys' exports queued behind them.
 */
export async function readyParquetStream(source: RowSource, stored = false): Promise<ReadyParquet> {
  if (stored) {
    const batches = await firstRead(source(refFromEvents, storedRefs));
    return { stream: () => storedParquetStream(batches), cancel: async () => void (await batches.return()) };
  }
  const batches = await firstRead(source(rowRef));
  return {
    stream: () => parquetStream(batches, fillColumns),
    cancel: async () => void (await batches.return()),
  };
}

/**
 * `batches` with its first batch read: the same batches, the first one given from what was read.
 * `return` closes the source even before the first batch is taken (a generator wrapped around it
 * would not run its `finally` then).
 */
async function firstRead<T>(
  batches: Batches<T>,
): Promise<AsyncIterableIterator<T[]> & { return(): Promise<IteratorResult<T[]>> }> {
  const source: AsyncIterator<T[]> | Iterator<T[]> =
    Symbol.asyncIterator in batches ? batches[Symbol.asyncIterator]() : batches[Symbol.iterator]();
  let first: IteratorResult<T[]> | null = await source.next();
  const done: IteratorResult<T[]> = { done: true, value: undefined };
  const iterator = {
    [Symbol.asyncIterator]: () => iterator,
    next: async (): Promise<IteratorResult<T[]>> => {
      if (first === null) return source.next();
      const given = first;
      first = null;
      return given;
    },
    return: async (): Promise<IteratorResult<T[]>> => {
      first = null;
      await source.return?.();
      return done;
    },
  };
  return iterator;
}

/**
 * A history export's CSV or NDJSON answer (Parquet: readyParquetStream). NDJSON copies the
 * export-rows projection's bytes where the source's scan has them (storedLines).
 */
export function historyStream(
  format: Exclude<HistoryFormat, 'parquet'>,
  source: RowSource,
  trailer: (() => object) | null,
  sent?: () => boolean,
): Readable {
  if (format === 'csv') return csvStream(source(historyRow));
  return ndjsonStream(source<NdjsonItem>(historyRow, storedLines), trailer, sent);
}
