import { Readable } from 'node:stream';
import * as arrow from 'apache-arrow';
import * as parquet from 'parquet-wasm/node';
import { HISTORY_COLUMNS, type HistoryFormat, type HistoryRow } from '../../contracts/history.ts';

/**
 * Serialisers for history rows. Each pulls rows from an async iterable only as fast as the
 * returned stream is read (Readable.from and a pull-based web stream), so a slow client holds
 * one batch in memory, never the range it asked for.
 */

/**
 * Parquet row groups of 1,024 rows: the streaming writer (parquet-wasm's transformParquetStream)
 * closes a row group only when it is full and has one fixed size per file, so the first bytes
 * leave after this many rows; a growing size is not available from it. Batches handed to it grow
 * (1,024 → 8,192 rows) so the per-batch cost of crossing into the writer is paid rarely.
 */
const ROW_GROUP_ROWS = 1_024;
const MAX_BATCH_ROWS = 8_192;
const NDJSON_CHUNK = 64 * 1024;

export function ndjsonStream(rows: AsyncIterable<HistoryRow>, trailer: () => object): Readable {
  return Readable.from(
    (async function* () {
      let chunk = '';
      let first = true;
      for await (const row of rows) {
        chunk += `${JSON.stringify(row)}\n`;
        // The first row goes out alone: a client sees data at once, then full chunks follow.
        if (first || chunk.length >= NDJSON_CHUNK) {
          first = false;
          yield chunk;
          chunk = '';
        }
      }
      yield `${chunk}${JSON.stringify(trailer())}\n`;
    })(),
    { objectMode: false },
  );
}

function csvField(value: unknown): string {
  if (value === null || value === undefined) return '';
  const text = typeof value === 'string' ? value : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export function csvLine(row: HistoryRow): string {
  return `${HISTORY_COLUMNS.map((c) => csvField(row[c])).join(',')}\n`;
}

export const CSV_HEADER = `${HISTORY_COLUMNS.join(',')}\n`;

export function csvStream(rows: AsyncIterable<HistoryRow>): Readable {
  return Readable.from(
    (async function* () {
      let chunk = CSV_HEADER;
      for await (const row of rows) {
        chunk += csvLine(row);
        if (chunk.length >= NDJSON_CHUNK) {
          yield chunk;
          chunk = '';
        }
      }
      if (chunk) yield chunk;
    })(),
    { objectMode: false },
  );
}

export type Kind = 'utf8' | 'int64' | 'int32' | 'float64' | 'bool';
export const KINDS: Record<keyof HistoryRow, Kind> = {
  position: 'int64',
  verdict_id: 'utf8',
  stream: 'utf8',
  revision: 'int64',
  recorded_at: 'utf8',
  exchange: 'utf8',
  coin: 'utf8',
  timeframe: 'utf8',
  hash: 'utf8',
  prev_hash: 'utf8',
  reveal_at: 'utf8',
  revealed: 'bool',
  call: 'utf8',
  confidence: 'int32',
  score: 'float64',
  regime: 'utf8',
  price: 'float64',
  candle_close_time: 'int64',
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
};

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
 * go straight into typed arrays. This is most of the Parquet path's cost.
 */
function column(kind: Kind, values: unknown[]): arrow.Vector {
  const length = values.length;
  const { bitmap, nulls } = validity(values);
  const nullBitmap = nulls > 0 ? bitmap : undefined;
  switch (kind) {
    case 'utf8': {
      const strings = values as (string | null)[];
      const joined = strings.filter((v) => v !== null).join('');
      const data = Buffer.from(joined, 'utf8');
      const ascii = data.length === joined.length;
      const valueOffsets = new Int32Array(length + 1);
      let at = 0;
      for (let i = 0; i < length; i++) {
        const v = strings[i];
        if (v !== null && v !== undefined) at += ascii ? v.length : Buffer.byteLength(v);
        valueOffsets[i + 1] = at;
      }
      return arrow.makeVector(
        arrow.makeData({ type: new arrow.Utf8(), length, nullCount: nulls, nullBitmap, valueOffsets, data }),
      );
    }
    case 'float64':
      return arrow.makeVector(
        arrow.makeData({
          type: new arrow.Float64(),
          length,
          nullCount: nulls,
          nullBitmap,
          data: Float64Array.from(values, (v) => (v === null ? 0 : (v as number))),
        }),
      );
    case 'int32':
      return arrow.makeVector(
        arrow.makeData({
          type: new arrow.Int32(),
          length,
          nullCount: nulls,
          nullBitmap,
          data: Int32Array.from(values, (v) => (v === null ? 0 : (v as number))),
        }),
      );
    case 'int64':
      return arrow.makeVector(
        arrow.makeData({
          type: new arrow.Int64(),
          length,
          nullCount: nulls,
          nullBitmap,
          data: BigInt64Array.from(values, (v) => (v === null ? 0n : BigInt(v as number))),
        }),
      );
    case 'bool':
      return arrow.vectorFromArray(values as (boolean | null)[], new arrow.Bool());
  }
}

function batchTable(rows: HistoryRow[]): arrow.Table {
  const columns: Record<string, arrow.Vector> = {};
  for (const name of HISTORY_COLUMNS)
    columns[name] = column(
      KINDS[name],
      rows.map((r) => r[name]),
    );
  return new arrow.Table(columns);
}

/** Parquet via the Rust writer (parquet-wasm), streamed batch by batch as it is written. */
export function parquetStream(rows: AsyncIterable<HistoryRow>): Readable {
  const iterator = rows[Symbol.asyncIterator]();
  let done = false;
  let batchRows = ROW_GROUP_ROWS;
  const batches = new ReadableStream({
    async pull(controller) {
      if (done) return;
      // Building a batch and encoding it are one unbroken chain of promise jobs; letting the event
      // loop turn first lets the bytes already written (the socket's corked first chunk included)
      // leave before the next batch is built.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const batch: HistoryRow[] = [];
      const want = batchRows;
      batchRows = Math.min(MAX_BATCH_ROWS, batchRows * 2);
      while (batch.length < want) {
        const next = await iterator.next();
        if (next.done) {
          done = true;
          break;
        }
        batch.push(next.value);
      }
      // An empty export is still a valid file with the full schema.
      if (batch.length > 0 || done) {
        const ipc = arrow.tableToIPC(batchTable(batch), 'stream');
        for (const rb of parquet.Table.fromIPCStream(ipc).recordBatches()) controller.enqueue(rb);
      }
      if (done) controller.close();
    },
    async cancel() {
      await iterator.return?.();
    },
  });
  const properties = new parquet.WriterPropertiesBuilder()
    .setCompression(parquet.Compression.SNAPPY)
    .setMaxRowGroupSize(ROW_GROUP_ROWS)
    .build();
  return Readable.from(
    (async function* () {
      const bytes = await parquet.transformParquetStream(batches, properties);
      const reader = bytes.getReader();
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) return;
        yield Buffer.from(value as Uint8Array);
      }
    })(),
    // Byte mode: Readable.from defaults to object mode, which buffers 16 chunks (here up to 16
    // batches of encoded row groups) ahead of the socket.
    { objectMode: false },
  );
}

export function historyStream(
  format: HistoryFormat,
  rows: AsyncIterable<HistoryRow>,
  trailer: () => object,
): Readable {
  if (format === 'csv') return csvStream(rows);
  if (format === 'parquet') return parquetStream(rows);
  return ndjsonStream(rows, trailer);
}
