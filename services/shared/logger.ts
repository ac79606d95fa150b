import { writeSync } from 'node:fs';
import { type Logger, pino } from 'pino';
import type { Config } from '../../contracts/config.ts';

/**
 * Lines are gathered up to this many bytes before one write(2). The access log writes a line per
 * request, and each asynchronous write is a round trip through libuv's thread pool; the access
 * lines of one event-loop turn reach this stream as one string (request-log.ts, TurnLines). On
 * each write sonic-boom measures the chunk it is filling (Buffer.byteLength of it, joined into one
 * string first), so handed a turn's lines at a time a chunk cost about its size again per turn
 * while it filled: ~1.5 µs of a keyed MCP call under load. BufferedStdout therefore holds the
 * lines itself, as one string, and hands them on in pieces of this size (or at a flush), which
 * sonic-boom measures once each.
 */
const BUFFER_BYTES = 64 * 1024;
/** sonic-boom starts a new chunk past this many bytes (16 KB by default); one longer line goes whole. */
const MAX_WRITE = 256 * 1024;
/** A quiet process's lines still go out within this long. */
const FLUSH_MS = 200;

/**
 * pino's destination: sonic-boom writing strings. It wrote Buffers until 2026-11-26: each write
 * (one per turn of access lines) became a Buffer of its own, merged into another per chunk, and
 * that memory outside V8's heap made V8 run a full mark-compact of the ~370 MB heap every 2 s
 * under load (7 in 15 s of 402 quotes; none in the same 15 s with the access line off, or with
 * strings, of which sonic-boom makes one Buffer per chunk once written). Paired against Buffers,
 * the 402 quote took 22.8 against 26.0 µs of main-thread CPU per request (24.7 against 32.4 for
 * the whole process, whose helper threads did the marking) and `/healthz` 13.7 against 16.1.
 * flushSync is what main's exit path calls.
 */
class BufferedStdout {
  private readonly sink = pino.destination({
    dest: 1,
    sync: false,
    minLength: BUFFER_BYTES,
    maxWrite: MAX_WRITE,
  });

  /**
   * Lines not handed to the sink yet (see BUFFER_BYTES): every flush hands them on first, and so
   * does the process's exit (handOnAtExit).
   */
  private held = '';

  constructor() {
    live.add(new WeakRef(this));
  }

  write(line: string): boolean {
    this.held += line;
    return this.held.length >= BUFFER_BYTES ? this.handOn() : true;
  }

  private handOn(): boolean {
    const text = this.held;
    if (text === '') return true;
    this.held = '';
    return this.sink.write(text);
  }

  /** At exit: what is held, to the sink, whose own exit hook (pino's) then writes it out. */
  handOnAtExit(): void {
    try {
      this.handOn();
    } catch {
      // The sink has ended: nothing can be written any more.
    }
  }

  flush(cb?: (err?: Error) => void): void {
    this.handOn();
    this.sink.flush(cb);
  }

  flushSync(): void {
    this.handOn();
    this.sink.flushSync();
  }

  /**
   * Writes out everything held, synchronously, on the way to SIGKILL (main's killSelf). sonic-boom's
   * flushSync leaves the chunk whose asynchronous write is under way to that write, which never
   * happens when the thread pool is stuck, the very case main kills itself for: with 64–256 KB
   * chunks that lost ~800 access lines. That chunk is written here first, so a write that did
   * complete before the kill puts it out twice, and one that wrote part of it leaves that part cut
   * off before the whole again (one broken line); on the way out a duplicate beats a loss. A clean
   * exit needs none of this: Node finishes the thread pool's writes before the process ends, and
   * pino's exit hook writes the rest.
   */
  flushBeforeKill(): void {
    this.handOn();
    const sink = this.sink as unknown as { _writing: boolean; _writingBuf: string | Buffer; fd: number };
    const held = sink._writingBuf;
    if (sink._writing && held.length > 0) {
      writeAll(sink.fd, typeof held === 'string' ? Buffer.from(held) : held);
    }
    this.sink.flushSync();
  }
}

/**
 * Every BufferedStdout made, so that what each holds reaches its sink when the process exits.
 * The hooks are added as this module loads, before any sink exists: pino adds its own exit hook
 * to each sink it makes (a synchronous flush at exit, a flush and end at beforeExit), and hooks
 * run in the order they were added, so the held lines are in the sink by the time it is flushed.
 */
const live = new Set<WeakRef<BufferedStdout>>();
function handOnAll(): void {
  for (const ref of live) {
    const stdout = ref.deref();
    if (stdout === undefined) live.delete(ref);
    else stdout.handOnAtExit();
  }
}
process.on('beforeExit', handOnAll);
process.once('exit', handOnAll);

/** write(2) until all of `chunk` is out, waiting out a full pipe (EAGAIN) for up to a second. */
function writeAll(fd: number, chunk: Buffer): void {
  let offset = 0;
  let waits = 0;
  while (offset < chunk.length) {
    try {
      offset += writeSync(fd, chunk, offset);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN' || ++waits > 1_000) throw err;
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
  setInterval(() => {
    // flush() throws while the stream is still opening or after it ended: the next tick retries.
    try {
      destination.flush();
    } catch {}
  }, FLUSH_MS).unref();
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
