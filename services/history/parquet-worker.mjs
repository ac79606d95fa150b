// The Parquet encoder of a history export, off the event loop (parquet-encoders.ts drives it).
// Plain JavaScript, not TypeScript: a worker thread is loaded by Node itself, without the
// loader that runs the service's sources (tsx, vitest), so it must need none.
//
// One export at a time. The protocol, all driven by the main thread, so neither side runs ahead
// of the other by more than a row group:
//   main → worker  {type:'start', id, properties}  begin an export
//   worker → main  {type:'pull', id}                send the next row group (one asked at a time)
//   main → worker  {type:'batch', id, ipc}          an Arrow IPC stream (its buffer transferred)
//   main → worker  {type:'rows', id, packed}        stored rows (stored-table.mjs; buffers transferred)
//   main → worker  {type:'end', id}                 no more rows
//   main → worker  {type:'more', id}                the main thread may take one more chunk
//   worker → main  {type:'chunk', id, bytes}        encoded bytes (transferred)
//   worker → main  {type:'done', id} | {type:'error', id, message}
// When the reader goes away before the end, the main thread stops the worker instead of reusing it.
import { parentPort } from 'node:worker_threads';
import * as parquet from 'parquet-wasm/node';
import { enqueueRowGroup, writerProperties } from './parquet-input.mjs';

/** The export under way: its input queue and output credit. */
let current = null;

/**
 * Resolves at the next message of the export. Both loops may wait at once (the writer pulls a
 * row group while the output waits for credit), so every waiter is woken and checks again.
 */
function waiter(run) {
  return new Promise((resolve) => {
    run.wakers.push(resolve);
  });
}

/**
 * Asks for the next row group unless one is asked for or already waiting here. Asked as soon as
 * the writer takes a row group, not when the writer next reads: the writer encodes what it took in
 * one synchronous call, and the stream's own pull ran only after it, so the main thread built the
 * next row group while this thread sat idle and then waited while this thread encoded (a timeline
 * of an export: 15-20 ms encoding, then 30 ms building, never at once).
 */
function ask(run) {
  if (run.asked || run.ended || run.input.length > 0) return;
  run.asked = true;
  parentPort.postMessage({ type: 'pull', id: run.id });
}

async function encode(run, settings) {
  const batches = new ReadableStream({
    async pull(controller) {
      for (;;) {
        const message = run.input.shift();
        if (message === undefined) {
          ask(run);
          await waiter(run);
          continue;
        }
        if (message.type === 'end') return controller.close();
        ask(run);
        const group =
          message.type === 'rows' ? { packed: message.packed } : { ipc: new Uint8Array(message.ipc) };
        enqueueRowGroup(controller, group, settings.stored);
        return;
      }
    },
  });
  const reader = (await parquet.transformParquetStream(batches, writerProperties(settings))).getReader();
  for (;;) {
    while (run.credit === 0) await waiter(run);
    const { value, done } = await reader.read();
    if (done) break;
    run.credit--;
    // The writer's chunks are copies out of the module's memory; a view of a larger buffer
    // is copied once more so that what is transferred is exactly the chunk.
    const whole = value.byteOffset === 0 && value.byteLength === value.buffer.byteLength;
    const bytes = whole ? value : value.slice();
    parentPort.postMessage({ type: 'chunk', id: run.id, bytes }, [bytes.buffer]);
  }
  parentPort.postMessage({ type: 'done', id: run.id });
}

parentPort.on('message', (message) => {
  if (message.type === 'start') {
    const run = { id: message.id, input: [], credit: 0, wakers: [], asked: false, ended: false };
    current = run;
    encode(run, message.properties).then(
      () => {
        if (current === run) current = null;
      },
      (err) => {
        if (current === run) current = null;
        parentPort.postMessage({ type: 'error', id: run.id, message: String(err?.message ?? err) });
      },
    );
    return;
  }
  const run = current;
  if (!run || run.id !== message.id) return;
  if (message.type === 'batch' || message.type === 'rows' || message.type === 'end') {
    run.asked = false;
    run.ended ||= message.type === 'end';
    run.input.push(message);
  } else if (message.type === 'more') run.credit++;
  for (const wake of run.wakers.splice(0)) wake();
});
