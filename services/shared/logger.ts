import { writeSync } from 'node:fs';
import { type Logger, pino } from 'pino';
import { DependencyRefusedError } from '../../adapters/dependency-refused.ts';
import { EventStoreUnavailableError, StatementCancelledError } from '../../adapters/event-store/port.ts';
import type { Config } from '../../contracts/config.ts';

/**
 * Lines are gathered up to this many characters before one write(2). The access log writes a line
 * per request; the access lines of one event-loop turn reach this stream as one string
 * (request-log.ts, TurnLines), and one write per 64 KB keeps the write calls few: a write costs the
 * same whether it carries one line or hundreds.
 */
const BUFFER_BYTES = 64 * 1024;
/** A quiet process's lines still go out within this long. */
const FLUSH_MS = 200;
/** How soon a write the pipe refused (full, EAGAIN) or took only part of is tried again. */
const RETRY_MS = 10;
/** On the way out, how many 1 ms waits in a row with a full pipe before the rest is given up. */
const EXIT_WAITS = 1_000;

/**
 * pino's destination: stdout, written by this thread alone, with write(2) on a non-blocking
 * descriptor, so that the bytes written are always known. Not through libuv's thread pool (as
 * sonic-boom's asynchronous writes go): a SIGKILL on the way out (main's killSelf) would find a
 * chunk the pool has perhaps written, perhaps in part (a full pipe takes what it has room for),
 * its result not back on this thread; written again whole, the part already out is followed by
 * the whole (a line cut and spliced into the next), and a write still under way in the pool runs
 * beside this thread's (two writers, interleaved); left out, it is lost when the pool is stuck,
 * the very case main kills itself for. Here the rest of a write the pipe took in part (`cut`)
 * goes out first and the lines after it wait behind it: what is out is always a prefix of the
 * lines. A full pipe is tried again after RETRY_MS, never waited on, except on the way out.
 * Lines are written as strings (no Buffer of their own unless a write is cut): Buffers outside
 * V8's heap, one per turn of access lines, made V8 run a full mark-compact every 2 s under load.
 */
class BufferedStdout {
  private readonly fd = 1;

  /** The unwritten end of the last write, which the pipe took in part: it goes out before `held`. */
  private cut: Buffer | null = null;

  /** Lines not written yet (see BUFFER_BYTES), after `cut`. */
  private held = '';

  /** stdout refused a write for good (EPIPE: no reader): lines are dropped from then on. */
  private closed = false;

  /** The process is exiting: no timer will run again, each line is written at once. */
  private exiting = false;

  private retry: NodeJS.Timeout | null = null;

  /** flush() callbacks waiting for everything to be written. */
  private flushed: Array<(err?: Error) => void> = [];

  constructor() {
    // A pipe or socket on stdout is made non-blocking when Node opens process.stdout (libuv's
    // uv_pipe_open): a slow reader then makes a write take less instead of stalling this thread.
    void process.stdout;
    live.add(new WeakRef(this));
  }

  write(line: string): boolean {
    this.held += line;
    if (this.exiting) this.flushSync();
    else if (this.held.length >= BUFFER_BYTES) this.pump();
    return true;
  }

  /** Writes what the pipe takes now; what it does not take is tried again after RETRY_MS. */
  private pump(): void {
    if (this.closed) {
      this.drop();
      return;
    }
    try {
      if (this.cut !== null) {
        this.cut = rest(this.cut, writeNow(this.fd, this.cut));
      }
      if (this.cut === null && this.held !== '') {
        const text = this.held;
        this.held = '';
        const written = writeNow(this.fd, text);
        if (written < Buffer.byteLength(text)) this.cut = Buffer.from(text).subarray(written);
      }
    } catch {
      // stdout gone (EPIPE, EBADF): nothing can be written any more.
      this.closed = true;
      this.drop();
      return;
    }
    if (this.cut === null) {
      const callbacks = this.flushed;
      this.flushed = [];
      for (const cb of callbacks) cb();
    } else if (this.retry === null) {
      this.retry = setTimeout(() => {
        this.retry = null;
        this.pump();
      }, RETRY_MS);
      // Not a reason to stay alive: the exit hook writes what is left.
      this.retry.unref();
    }
  }

  private drop(): void {
    this.cut = null;
    this.held = '';
    const callbacks = this.flushed;
    this.flushed = [];
    for (const cb of callbacks) cb(new Error('stdout is closed'));
  }

  /** Calls back once everything held is written (pino's logger.flush). */
  flush(cb?: (err?: Error) => void): void {
    if (cb) this.flushed.push(cb);
    this.pump();
  }

  /**
   * Writes out everything held now, waiting out a full pipe (up to EXIT_WAITS ms in a row without
   * progress): main's exit paths, the process's exit, and the way to SIGKILL.
   */
  flushSync(): void {
    if (this.closed) {
      this.drop();
      return;
    }
    const bytes =
      this.cut === null ? Buffer.from(this.held) : Buffer.concat([this.cut, Buffer.from(this.held)]);
    this.cut = null;
    this.held = '';
    try {
      writeAll(this.fd, bytes);
    } catch {
      this.closed = true;
    }
    const callbacks = this.flushed;
    this.flushed = [];
    for (const cb of callbacks) cb();
  }

  /**
   * On the way to SIGKILL (main's killSelf): every write was made by this thread, so what is out
   * is known to the byte and the rest follows it, each line whole and once.
   */
  flushBeforeKill(): void {
    this.flushSync();
  }

  /** At exit: what is left, written before the process ends; lines logged later go at once. */
  writeAtExit(): void {
    this.exiting = true;
    try {
      this.flushSync();
    } catch {
      // stdout refused: nothing can be written any more.
    }
  }
}

/** What of `chunk` is left after `written` bytes of it went out; null once all did. */
function rest(chunk: Buffer, written: number): Buffer | null {
  return written >= chunk.length ? null : chunk.subarray(written);
}

/** One write(2): the bytes the descriptor took, 0 when it is full (EAGAIN). */
function writeNow(fd: number, data: string | Buffer): number {
  try {
    return typeof data === 'string' ? writeSync(fd, data) : writeSync(fd, data);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return 0;
    throw err;
  }
}

/**
 * Every BufferedStdout made, so that what each holds is written when the process exits (its own
 * timers never run again then).
 */
const live = new Set<WeakRef<BufferedStdout>>();
process.once('exit', () => {
  for (const ref of live) ref.deref()?.writeAtExit();
});

/** write(2) until all of `chunk` is out, waiting out a full pipe for up to EXIT_WAITS ms in a row. */
function writeAll(fd: number, chunk: Buffer): void {
  let offset = 0;
  let waits = 0;
  while (offset < chunk.length) {
    const written = writeNow(fd, chunk.subarray(offset));
    if (written > 0) {
      offset += written;
      waits = 0;
    } else {
      if (++waits > EXIT_WAITS) throw new Error('stdout stayed full');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

/** What a redacted secret is logged as (headers here, secret-looking URL parts in the access log). */
export const REDACTED = '[redacted]';

/**
 * pino's error serializer, with each cause stated once in the message: pino appends every cause's
 * message to the error's, so an error whose text already names its cause (`postgres unreachable:
 * X`, with cause X) was logged `postgres unreachable: X: X`. A cause the text so far already holds
 * is not appended again; the others are, as pino does. The stack keeps pino's `caused by:` chain.
 */
export function serializeError(err: unknown): unknown {
  const serialized = pino.stdSerializers.err(err as Error);
  if (!(err instanceof Error)) return serialized;
  let message = err.message;
  const seen = new Set<unknown>([err]);
  // Error-like causes (an object with a string message) count, as pino's own chain counts them.
  for (let cause: unknown = err.cause; isErrorLike(cause) && !seen.has(cause); cause = cause.cause) {
    seen.add(cause);
    if (cause.message !== '' && !namesCause(message, cause.message)) message += `: ${cause.message}`;
  }
  // The event store's outage (its server away, its disk full) is an expected state that every
  // reader, saver and ticker of a process meets and logs while it lasts, each line with the same
  // stack of the adapter's retry and the driver's socket: 404 lines of ~1.5 KB in a 21 s
  // PostgreSQL stop across four roles. Its message and type say all there is; no stack.
  // A server refused at start (DependencyRefusedError) is one line naming it and what to correct:
  // nothing in the code is at fault, and its stack was the driver's (pg-pool's) under it.
  // A statement cancelled at its timeout is not the outage: one caller's read or write was slow,
  // and the stack is what names it.
  const outage = err instanceof EventStoreUnavailableError && !(err instanceof StatementCancelledError);
  if (outage || err instanceof DependencyRefusedError) {
    const { stack: _stack, ...rest } = serialized;
    return { ...rest, message };
  }
  return { ...serialized, message };
}

interface ErrorLike {
  message: string;
  cause?: unknown;
}

function isErrorLike(value: unknown): value is ErrorLike {
  return typeof value === 'object' && value !== null && typeof (value as ErrorLike).message === 'string';
}

/**
 * Whether the text already states the cause as a clause of its own (at its start, or after ': '),
 * not merely holds its words: 'request timeout' does not name a cause 'timeout'.
 */
function namesCause(text: string, cause: string): boolean {
  return text.startsWith(cause) || text.includes(`: ${cause}`);
}

/**
 * JSON logs to stdout, buffered (a line reaches stdout within FLUSH_MS, and main's exit path
 * writes what is left); secrets that may pass through request headers are redacted.
 */
export function createLogger(
  config: Pick<Config, 'LOG_LEVEL'>,
  bindings: Record<string, unknown> = {},
): Logger {
  const destination = new BufferedStdout();
  setInterval(() => destination.flush(), FLUSH_MS).unref();
  return pino(
    {
      level: config.LOG_LEVEL,
      base: { service: 'signal-service', ...bindings },
      serializers: { err: serializeError },
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-payment"]',
          'req.headers["payment-signature"]',
          'headers.authorization',
        ],
        censor: REDACTED,
      },
    },
    destination,
  );
}
