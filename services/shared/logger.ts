import { type Logger, pino } from 'pino';
import type { Config } from '../../contracts/config.ts';

/** JSON logs to stdout; secrets that may pass through request headers are redacted. */
export function createLogger(
  config: Pick<Config, 'LOG_LEVEL'>,
  bindings: Record<string, unknown> = {},
): Logger {
  return pino({
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
  });
}
