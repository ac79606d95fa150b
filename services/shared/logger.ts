import { writeSync } from 'node:fs';
import { type Logger, pino } from 'pino';
import type { Config } from '../../contracts/config.ts';

/**
 * Lines are gathered up to this many bytes before one write(2). The access log writes a line per
 * request, and each asynchronous write is a round trip through libuv's thread pool: at 4 KB per
 * write that trip, with sonic-boom measuring its whole pending text again on every line it took
 * in (UTF-8 mode), cost ~0.9 µs per access line over building it; Buffers written 64–256 KB at a
 * time, ~0.3 µs.
 */
const BUFFER_BYTES = 64 * 1024;
/** One write(2) takes at most this much (sonic-boom writes 16 KB at a time by default). */
const MAX_WRITE = 256 * 1024;
/** A quiet process's lines still go out within this long. */
const FLUSH_MS = 200;

/**
 * pino's destination: sonic-boom in Buffer mode, which counts what it holds by the lengths of the
 * Buffers it is given instead of measuring its pending string again on each write. pino writes
 * strings, so each becomes a Buffer here. flushSync is what main's exit path calls.
 */
class BufferedStdout {
  private readonly sink = pino.destination({
    dest: 1,
    sync: false,
    minLength: BUFFER_BYTES,
    maxWrite: MAX_WRITE,
    contentMode: 'buffer',
  });

  write(line: string): boolean {
    return this.sink.write(Buffer.from(line) as unknown as string);
  }

  flush(cb?: (err?: Error) => void): void {
    this.sink.flush(cb);
  }

  flushSync(): void {
    this.sink.flushSync();
  }

  /**
   * Writes out everything held, synchronously, on the way to SIGKILL (main's killSelf). sonic-boom's
   * flushSync leaves the chunk whose asynchronous write is under way to that write, which never
   * happens when the thread pool is stuck, the very case main kills itself for: with 64–256 KB
   * chunks that lost ~800 access lines. That chunk is written here first, so a write that did
   * complete before the kill puts it out twice; on the way out a duplicate beats a loss. A clean
   * exit needs none of this: Node finishes the thread pool's writes before the process ends, and
   * pino's exit hook writes the rest.
   */
  flushBeforeKill(): void {
    const sink = this.sink as unknown as { _writing: boolean; _writingBuf: Buffer; fd: number };
    if (sink._writing && Buffer.isBuffer(sink._writingBuf) && sink._writingBuf.length > 0) {
      writeAll(sink.fd, sink._writingBuf);
    }
    this.sink.flushSync();
  }
}

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
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-payment"]',
          'req.headers["payment-signature"]',
          'headers.authorization',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
