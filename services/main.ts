import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../contracts/config.ts';
import { ROLES, type Role } from './component.ts';
import { startService } from './service.ts';
import { createLogger } from './shared/logger.ts';

/**
 * Entry point. `npm start` runs every role in one process on the embedded adapters;
 * `--role api|engine|projections` (repeatable, or comma-separated) runs a subset for the distributed
 * deployment.
 */
function parseRoles(argv: string[]): Role[] {
  const { values } = parseArgs({
    args: argv,
    options: { role: { type: 'string', multiple: true } },
    strict: true,
  });
  const requested = (values.role ?? ['all']).flatMap((r) => r.split(','));
  if (requested.includes('all')) return [...ROLES];
  for (const role of requested) {
    if (!(ROLES as readonly string[]).includes(role)) {
      throw new ConfigError(`unknown role "${role}": expected one of all, ${ROLES.join(', ')}`);
    }
  }
  return requested as Role[];
}

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  let roles: Role[];
  try {
    config = loadConfig();
    roles = parseRoles(process.argv.slice(2));
  } catch (err) {
    // No logger yet: the configuration that would set it up is what is wrong.
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  const logger = createLogger(config, { roles: roles.join(',') });
  const service = await startService(config, roles, logger);

  let signals = 0;
  const shutdown = (signal: string) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting at once');
      process.exit(1);
    }
    logger.info({ signal }, 'shutting down');
    const timer = setTimeout(() => {
      logger.error({ timeoutMs: config.SHUTDOWN_TIMEOUT_MS }, 'shutdown timed out: exiting');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((err: unknown) => {
  if (err instanceof ConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
  process.stderr.write(
    `failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
