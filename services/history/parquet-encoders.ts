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
 * every worker is busy, an export waits for the first one free, in the order they came: encoding
 * it on the event loop instead held every other caller (a penetration walk: 6 Parquet exports of
 * 3 free keys took /healthz to p90 1.8 s, max 5.0 s, the loop's lag to 2.1 s).
 */
export class ParquetEncoders {
  private readonly idle: Worker[] = [];
  private busy = 0;
  private nextId = 1;
  private readonly idleTimers = new Map<Worker, NodeJS.Timeout>();
  /** Exports waiting for a worker, first come first served. */
  private readonly waiting: Waiter[] = [];
  /**
   * With every worker busy: `wait` for one (what the service does), or `here`, answer null and let
   * the caller encode on its own thread (what it did before; bench/history.bench.ts, fairness,
   * measures the two in one run).
   */
  whenBusy: 'wait' | 'here' = 'wait';
  private closed = false;

  constructor(
    private readonly size = Math.min(2, availableParallelism()),
    private readonly idleMs = 30_000,
  ) {}

  /** Workers started and not stopped (busy or idle). */
  get workers(): number {
    return this.busy + this.idle.length;
  }

  /** Exports waiting for a free worker. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Workers at most (busy and idle). */
  get capacity(): number {
    return this.size;
  }

  /**
   * Encodes the row groups `next` gives (null = no more) as one Parquet file, streamed as it is
   * written, on a worker (waiting for one when all are busy); null once the encoders are closed,
   * or when all are busy and `whenBusy` is `here`.
   * `cancel` runs when the reader goes away before the end.
   */
  encode(
    settings: ParquetSettings,
    next: () => Promise<RowGroup | null>,
    cancel: () => Promise<void>,
  ): Readable | null {
    if (this.closed) return null;
    const id = this.nextId++;
    let worker: Worker | null = null;
    /** The reader asked for bytes before a worker was free. */
    let wanted = false;
    let finished = false;
    const finish = (reuse: boolean) => {
      if (finished) return;
      finished = true;
      if (!worker) {
        // Still waiting: it leaves the queue and never takes a worker.
        const at = this.waiting.indexOf(waiter);
        if (at >= 0) this.waiting.splice(at, 1);
        return;
      }
      worker.off('message', onMessage);
      worker.off('error', onFailure);
      worker.off('exit', onExit);
      if (reuse) this.give(worker);
      else this.discard(worker);
    };
    const readable = new Readable({
      read() {
        if (worker) worker.postMessage({ type: 'more', id });
        else wanted = true;
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
              // A pull comes from the worker this export was started on.
              const started = worker;
              if (finished || !started) return;
              if (group === null) {
                started.postMessage({ type: 'end', id });
                return;
              }
              if ('packed' in group) {
                const { bytes, verdictAt, outcomeAt, positions, cursorData, cursorOffsets } = group.packed;
                started.postMessage({ type: 'rows', id, packed: group.packed }, [
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
              started.postMessage({ type: 'batch', id, ipc: bytes.buffer }, [bytes.buffer as ArrayBuffer]);
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
    const waiter: Waiter = {
      start: (taken) => {
        worker = taken;
        taken.on('message', onMessage);
        taken.on('error', onFailure);
        taken.on('exit', onExit);
        taken.postMessage({ type: 'start', id, properties: settings });
        if (wanted) taken.postMessage({ type: 'more', id });
      },
      fail: (err) => readable.destroy(err),
    };
    const free = this.take();
    if (free) waiter.start(free);
    else if (this.whenBusy === 'wait') this.waiting.push(waiter);
    else {
      finished = true;
      return null;
    }
    return readable;
  }

  /** Stops every idle worker and fails the exports still waiting; busy ones stop when their export ends. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) waiter.fail(new Error('parquet encoders closed'));
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
    const waiter = this.closed ? undefined : this.waiting.shift();
    if (waiter) {
      // Handed on busy as it is: the next export in line starts at once.
      waiter.start(worker);
      return;
    }
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
    // Its place goes to the next export in line, on a fresh worker.
    if (this.waiting.length === 0) return;
    const fresh = this.take();
    if (fresh) this.waiting.shift()!.start(fresh);
  }
}

/** An export waiting for a worker: `start` hands it one, `fail` ends it unstarted. */
interface Waiter {
  start(worker: Worker): void;
  fail(err: Error): void;
}

let shared: ParquetEncoders | null = null;

/** The process's encoders: exports share them, whichever slice or command starts them. */
export function sharedParquetEncoders(): ParquetEncoders {
  shared ??= new ParquetEncoders();
  return shared;
}
