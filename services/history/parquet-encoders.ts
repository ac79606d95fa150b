import { availableParallelism } from 'node:os';
import { Readable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import type { RowGroup } from './parquet-input.mjs';
import type { StoredPlan } from './stored-table.mjs';

/** How the worker sets up its writer (writers.ts owns the choices). */
export interface ParquetSettings {
  rowGroupRows: number;
  dictionary: readonly string[];
  uncompressed: readonly string[];
  /** Columns written without min/max statistics. */
  withoutStatistics: readonly string[];
  /** How a row group of stored rows becomes columns (stored-columns.ts). */
  stored: StoredPlan;
}

/** Messages from the worker (parquet-worker.mjs documents the protocol). */
type FromWorker =
  | { type: 'pull'; id: number }
  | { type: 'chunk'; id: number; bytes: Uint8Array }
  | { type: 'done'; id: number }
  | { type: 'error'; id: number; message: string };

const WORKER_URL = new URL('./parquet-worker.mjs', import.meta.url);

/**
 * Worker threads that encode Parquet for history exports. Encoding is most of a Parquet
 * export's CPU (the Rust writer, compiled to WebAssembly, takes a row group in one synchronous
 * call of tens of milliseconds), so on the event loop it held up every other request for that
 * long, row group after row group, and it ran one after the other with reading the rows. On a
 * worker the two overlap: the event loop reads the next row group while the worker encodes the
 * last one. Stored rows reach the worker packed into one buffer, and the worker lays out their
 * columns too (as long as encoding them): the event loop only reads and copies them.
 *
 * At most `size` workers, started on first use and stopped after `idleMs` without work. When
 * every worker is busy, `encode` answers null and the caller encodes on its own thread: a burst
 * of exports is never queued behind a long one.
 */
export class ParquetEncoders {
  private readonly idle: Worker[] = [];
  private busy = 0;
  private nextId = 1;
  private readonly idleTimers = new Map<Worker, NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly size = Math.min(2, availableParallelism()),
    private readonly idleMs = 30_000,
  ) {}

  /** Workers started and not stopped (busy or idle). */
  get workers(): number {
    return this.busy + this.idle.length;
  }

  /**
   * Encodes the row groups `next` gives (null = no more) as one Parquet file,
   * streamed as it is written; null when no worker is free. `cancel` runs when the reader goes
   * away before the end.
   */
  encode(
    settings: ParquetSettings,
    next: () => Promise<RowGroup | null>,
    cancel: () => Promise<void>,
  ): Readable | null {
    const worker = this.take();
    if (!worker) return null;
    const id = this.nextId++;
    let finished = false;
    const finish = (reuse: boolean) => {
      if (finished) return;
      finished = true;
      worker.off('message', onMessage);
      worker.off('error', onFailure);
      worker.off('exit', onExit);
      if (reuse) this.give(worker);
      else this.discard(worker);
    };
    const readable = new Readable({
      read() {
        worker.postMessage({ type: 'more', id });
      },
      destroy(err, callback) {
        // Gone before the end (the client left, or a failure): the worker's state is unknown,
        // so it is stopped rather than reused, and the rows' source is closed.
        if (!finished) {
          finish(false);
          cancel().then(
            () => callback(err),
            () => callback(err),
          );
          return;
        }
        callback(err);
      },
    });
    const onMessage = (message: FromWorker) => {
      if (message.id !== id) return;
      switch (message.type) {
        case 'pull':
          next().then(
            (group) => {
              if (finished) return;
              if (group === null) {
                worker.postMessage({ type: 'end', id });
                return;
              }
              if ('packed' in group) {
                const { bytes, verdictAt, outcomeAt, positions, cursorData, cursorOffsets } = group.packed;
                worker.postMessage({ type: 'rows', id, packed: group.packed }, [
                  bytes.buffer as ArrayBuffer,
                  verdictAt.buffer as ArrayBuffer,
                  outcomeAt.buffer as ArrayBuffer,
                  positions.buffer as ArrayBuffer,
                  cursorData.buffer as ArrayBuffer,
                  cursorOffsets.buffer as ArrayBuffer,
                ]);
                return;
              }
              // The IPC stream's buffer is handed over, not copied, when it is the whole buffer.
              const { ipc } = group;
              const whole = ipc.byteOffset === 0 && ipc.byteLength === ipc.buffer.byteLength;
              const bytes = whole ? ipc : ipc.slice();
              worker.postMessage({ type: 'batch', id, ipc: bytes.buffer }, [bytes.buffer as ArrayBuffer]);
            },
            (err: Error) => readable.destroy(err),
          );
          return;
        case 'chunk':
          readable.push(
            Buffer.from(message.bytes.buffer, message.bytes.byteOffset, message.bytes.byteLength),
          );
          return;
        case 'done':
          finish(true);
          readable.push(null);
          return;
        case 'error':
          readable.destroy(new Error(`parquet encoder: ${message.message}`));
          return;
      }
    };
    const onFailure = (err: Error) => readable.destroy(err);
    const onExit = (code: number) => readable.destroy(new Error(`parquet encoder exited (code ${code})`));
    worker.on('message', onMessage);
    worker.on('error', onFailure);
    worker.on('exit', onExit);
    worker.postMessage({ type: 'start', id, properties: settings });
    return readable;
  }

  /** Stops every idle worker; busy ones stop when their export ends. */
  async close(): Promise<void> {
    this.closed = true;
    const idle = this.idle.splice(0);
    for (const timer of this.idleTimers.values()) clearTimeout(timer);
    this.idleTimers.clear();
    await Promise.all(idle.map((w) => w.terminate()));
  }

  private take(): Worker | null {
    if (this.closed) return null;
    let worker = this.idle.pop();
    if (worker) {
      clearTimeout(this.idleTimers.get(worker));
      this.idleTimers.delete(worker);
    } else if (this.busy < this.size) {
      const started = new Worker(WORKER_URL);
      // A worker that dies while idle leaves the pool (it would swallow the next export's
      // messages), and an error with no export listening must not crash the process.
      started.on('error', () => {});
      started.once('exit', () => this.forgetIdle(started));
      worker = started;
    } else return null;
    this.busy++;
    // Busy, it keeps the process alive (a CLI export waits on it); idle, it does not.
    worker.ref();
    return worker;
  }

  private give(worker: Worker): void {
    this.busy--;
    if (this.closed) {
      void worker.terminate();
      return;
    }
    worker.unref();
    this.idle.push(worker);
    const timer = setTimeout(() => {
      this.idleTimers.delete(worker);
      const at = this.idle.indexOf(worker);
      if (at >= 0) this.idle.splice(at, 1);
      void worker.terminate();
    }, this.idleMs);
    timer.unref();
    this.idleTimers.set(worker, timer);
  }

  private forgetIdle(worker: Worker): void {
    const at = this.idle.indexOf(worker);
    if (at < 0) return;
    this.idle.splice(at, 1);
    clearTimeout(this.idleTimers.get(worker));
    this.idleTimers.delete(worker);
  }

  private discard(worker: Worker): void {
    this.busy--;
    void worker.terminate();
  }
}

let shared: ParquetEncoders | null = null;

/** The process's encoders: exports share them, whichever slice or command starts them. */
export function sharedParquetEncoders(): ParquetEncoders {
  shared ??= new ParquetEncoders();
  return shared;
}
