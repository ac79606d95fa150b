import { type Logger, pino } from 'pino';
import type { Config } from '../../contracts/config.ts';

/**
 * Lines are gathered up to this many bytes before one write(2): the access log writes a line per
 * request, and one write per line was the largest cost of the service's own code on a keyed call.
 */
const BUFFER_BYTES = 4096;
/** A quiet process's lines still go out within this long. */
const FLUSH_MS = 200;

/**
 * JSON logs to stdout, buffered (a line reaches stdout within FLUSH_MS, and main's exit path
 * writes what is left); secrets that may pass through request headers are redacted.
 */
export function createLogger(
  config: Pick<Config, 'LOG_LEVEL'>,
  bindings: Record<string, unknown> = {},
): Logger {
  const destination = pino.destination({ dest: 1, sync: false, minLength: BUFFER_BYTES });
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
