// @ts-check
// How a row group reaches the Parquet writer, on the encoder worker (parquet-worker.mjs) and on
// the main thread (writers.ts). Plain JavaScript checked by TypeScript through its JSDoc, as the
// worker loads it without a TypeScript loader.
import * as arrow from 'apache-arrow';
import * as parquet from 'parquet-wasm/node';
import { storedTable } from './stored-table.mjs';

/**
 * A row group: an Arrow IPC stream made on the main thread, or stored rows packed into one buffer,
 * whose columns are laid out by whichever thread encodes them (on the worker, off the event loop).
 * @typedef {{ ipc: Uint8Array } | { packed: import('./stored-table.mjs').PackedRows }} RowGroup
 */

/**
 * Hands a row group to the writer's input stream.
 * @param {ReadableStreamDefaultController<unknown>} controller
 * @param {RowGroup} group
 * @param {import('./stored-table.mjs').StoredPlan} plan how stored rows become columns
 */
export function enqueueRowGroup(controller, group, plan) {
  const ipc = 'ipc' in group ? group.ipc : arrow.tableToIPC(storedTable(group.packed, plan), 'stream');
  enqueueIpc(controller, ipc);
}

/**
 * Hands the record batches of an Arrow IPC stream to the writer's input stream, then frees the
 * Table that read them. parquet-wasm's objects hold WebAssembly memory until `free()` (or until
 * a finalizer runs, which little JS garbage rarely triggers): unfreed, every row group's Table
 * stayed in the module's memory, which never shrinks, so an export's memory grew with its size
 * (a 1,000,000-row export took the worker's module to ~490 MB; 120 row groups of 1.7 MB: 246 MB
 * against 27 MB freed), and an export of a few million rows would reach wasm32's 4 GB ceiling.
 * @param {ReadableStreamDefaultController<unknown>} controller
 * @param {Uint8Array} ipc
 */
function enqueueIpc(controller, ipc) {
  const table = parquet.Table.fromIPCStream(ipc);
  try {
    for (const rb of table.recordBatches()) controller.enqueue(rb);
  } finally {
    table.free();
  }
}

/** Bytes of WebAssembly memory the writer's module holds in this thread. */
export function parquetModuleBytes() {
  return parquet.wasmMemory().buffer.byteLength;
}

/**
 * The writer's settings for a history export (writers.ts chooses the columns), built the same
 * way on the worker and on the main thread.
 * @param {{ rowGroupRows: number, dictionary: readonly string[], uncompressed: readonly string[], withoutStatistics: readonly string[] }} settings
 */
export function writerProperties({ rowGroupRows, dictionary, uncompressed, withoutStatistics }) {
  let builder = new parquet.WriterPropertiesBuilder()
    .setCompression(parquet.Compression.SNAPPY)
    .setMaxRowGroupSize(rowGroupRows)
    .setDictionaryEnabled(false);
  for (const name of dictionary) builder = builder.setColumnDictionaryEnabled(name, true);
  for (const name of uncompressed)
    builder = builder.setColumnCompression(name, parquet.Compression.UNCOMPRESSED);
  for (const name of withoutStatistics)
    builder = builder.setColumnStatisticsEnabled(name, parquet.EnabledStatistics.None);
  return builder.build();
}
