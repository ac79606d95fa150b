import { z } from 'zod';

/**
 * Service configuration, read from the environment and validated at start. Every variable is
 * listed with its default in `.env.example`; a wrong value stops the process with a message that
 * names the variable.
 */
const port = z.coerce.number().int().min(0).max(65_535);
const positiveInt = z.coerce.number().int().positive();
const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

export const ConfigSchema = z
  .object({
    NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    HOST: z.string().min(1).default('0.0.0.0'),
    PORT: port.default(8080),
    /** Largest accepted request body; larger bodies get 413 before any handler runs. */
    BODY_LIMIT_BYTES: positiveInt.default(64 * 1024),
    /** How long SIGTERM waits for in-flight requests and checkpoints before forcing exit. */
    SHUTDOWN_TIMEOUT_MS: positiveInt.default(15_000),
    DATA_DIR: z.string().min(1).default('./data'),

    EVENT_STORE: z.enum(['lmdb', 'kurrentdb', 'memory']).default('lmdb'),
    KURRENTDB_URL: z.string().optional(),
    BUS: z.enum(['memory', 'nats']).default('memory'),
    NATS_URL: z.string().default('nats://127.0.0.1:4222'),
    NATS_STREAM: z
      .string()
      .regex(/^[A-Za-z0-9_-]+$/, 'letters, digits, _ and - only')
      .default('SIGNAL_EVENTS'),
    NATS_SUBJECT_PREFIX: z
      .string()
      .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'dot-separated tokens without wildcards')
      .default('sig'),
    CACHE: z.enum(['memory', 'redis']).default('memory'),
    REDIS_URL: z.string().default('redis://127.0.0.1:6379'),
    REDIS_PREFIX: z.string().default('sig:'),

    /** Events folded between two projection snapshots (state and checkpoint saved together). */
    PROJECTION_SNAPSHOT_EVERY: positiveInt.default(1000),
    METRICS_ENABLED: bool.default(true),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.EVENT_STORE === 'kurrentdb' && !cfg.KURRENTDB_URL) {
      ctx.addIssue({
        code: 'custom',
        path: ['KURRENTDB_URL'],
        message: 'required when EVENT_STORE=kurrentdb',
      });
    }
    if (cfg.NODE_ENV === 'production' && cfg.EVENT_STORE === 'memory') {
      ctx.addIssue({ code: 'custom', path: ['EVENT_STORE'], message: 'memory loses every event on restart' });
    }
  });

export type Config = z.infer<typeof ConfigSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** Parses the environment; the error message lists each bad variable by name. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // Empty strings mean "unset" so that `VAR=` in a .env file falls back to the default.
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const result = ConfigSchema.safeParse(cleaned);
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const name = issue.path.join('.') || '(config)';
    const value = typeof issue.path[0] === 'string' ? cleaned[issue.path[0]] : undefined;
    return `  ${name}: ${issue.message}${value === undefined ? '' : ` (got ${JSON.stringify(value)})`}`;
  });
  throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
}
