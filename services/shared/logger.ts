import { type Logger, pino } from 'pino';
import type { Config } from '../../contracts/config.ts';

/**
 * Lines are gathered up to this many bytes before one write(2). The access log writes a line per
 * request, and each asynchronous write is a round trip through libuv's thread pool: at 4 KB per
 * write that trip, with sonic-boom measuring its whole pending text again on every line it took
 * in (UTF-8 mode), cost ~0.9 µs per access line over building it; 64 KB of Buffers, ~0.3 µs.
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
