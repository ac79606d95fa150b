// First: an older Node is refused in one line before any other module runs.
import './shared/node-version.ts';
import { parseArgs } from 'node:util';
import { type Logger, pino } from 'pino';
import {
  ConfigError,
  loadConfig,
  readDotEnv,
  refuseRoleSettings,
  roleSettingWarnings,
} from '../contracts/config.ts';
import { unknownSettings, unknownSettingWarning } from '../contracts/setting-names.ts';
import { flushAccessLines } from './api/request-log.ts';
import { ROLES, type Role } from './component.ts';
import type { RunningService } from './service.ts';
import { DataDirInUse, lockDataDir } from './shared/data-dir-lock.ts';
import { openResources, startExitWatchdog } from './shared/exit-watchdog.ts';
import { invocation } from './shared/invocation.ts';
import { createLogger } from './shared/logger.ts';
import { pathRefusal } from './shared/path-refusal.ts';
import { isEcho, type SignalsSeen } from './shared/signal-echo.ts';

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
      // The relay is named among the services (readyz, logs) but is no role of its own.
      const hint = role === 'relay' ? '; the relay (event store to NATS) runs in the projections role' : '';
      throw new ConfigError(`unknown role "${role}": expected one of all, ${ROLES.join(', ')}${hint}`);
    }
  }
  return requested as Role[];
}

/** How to start it, naming the command as it was started (`npm run start --`, the image's node command). */
function usage(): string {
  return `usage: ${invocation('start')} [--role <role>]...\n  <role>: all (the default), ${ROLES.join(', ')}; repeatable or comma-separated`;
}

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  let roles: Role[];
  // Asked before anything is read: a configuration the service would refuse does not hide it.
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(`${usage()}\n`);
    process.exit(0);
  }
  try {
    readDotEnv();
    config = loadConfig();
    roles = parseRoles(process.argv.slice(2));
    refuseRoleSettings(config, roles);
  } catch (err) {
    // No logger yet: the configuration that would set it up is what is wrong. An argument it does
    // not take (parseArgs' codes) is followed by the usage.
    const badArgument = String((err as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS');
    process.stderr.write(
      `${err instanceof Error ? err.message : String(err)}\n${badArgument ? `\n${usage()}\n` : ''}`,
    );
    process.exit(1);
  }
  if (config.EVENT_STORE === 'lmdb') {
    // One service process per LMDB data directory (services/shared/data-dir-lock.ts).
    try {
      const lock = lockDataDir(config.DATA_DIR);
      process.on('exit', () => lock.release());
    } catch (err) {
      // Another process on it, or a directory this user may not write or that takes no new
      // entries (/proc, /sys): one line, as a refused setting, not a stack.
      if (err instanceof DataDirInUse) process.stderr.write(`${err.message}\n`);
      else if (typeof (err as NodeJS.ErrnoException).code === 'string')
        process.stderr.write(
          `DATA_DIR: ${pathRefusal(err) ?? `cannot use ${config.DATA_DIR}: ${(err as Error).message}`}\n`,
        );
      else throw err;
      process.exit(1);
    }
  }
  const logger = createLogger(config, { roles: roles.join(',') });
  // A setting that holds only while the process is alone in its role (CACHE=memory on an api run
  // apart) is told, not refused: the process cannot tell whether others serve beside it.
  for (const { setting, message } of roleSettingWarnings(config, roles, ROLES)) {
    logger.warn({ setting }, message);
  }
  // A variable the configuration does not know is ignored: one that looks meant as a setting
  // (NATS_ULR) is named, else the service runs on the default without a word.
  for (const unknown of unknownSettings(process.env)) {
    logger.warn({ variable: unknown.variable, nearest: unknown.nearest }, unknownSettingWarning(unknown));
  }
  // A signal may come while the process still starts (a supervisor stopping a slow start): it ends
  // the start at its next step, which closes what it opened, and the process exits 0 as a stop of a
  // started service does.
  const starting = new AbortController();
  let service: RunningService | null = null;
  let first: SignalsSeen | null = null;
  const shutdown = (signal: NodeJS.Signals) => {
    if (isEcho(first, signal)) {
      logger.info(
        { signal },
        'the same signal again, taken as its copy passed on by a parent process: already draining (one more exits at once)',
      );
      return;
    }
    if (first !== null) {
      logger.warn({ signal }, 'second signal: exiting at once');
      flushLogs(logger);
      killSelf();
    }
    first = { signal, echoed: false };
    const during = service === null ? { during: 'start' } : {};
    logger.info({ signal, ...during }, 'shutting down');
    // The drain (SHUTDOWN_DRAIN_MS) comes first and is not taken from the stop's own time.
    const timeoutMs = config.SHUTDOWN_DRAIN_MS + config.SHUTDOWN_TIMEOUT_MS;
    const timer = setTimeout(() => {
      // Which of the two SIGKILLs ended the process (this, or the exit's watchdog), and the step
      // of the stop it was waiting on.
      logger.fatal(
        {
          timer: 'shutdown',
          timeoutMs,
          ...during,
          stopping: service?.stopping() ?? null,
          open: openResources(),
        },
        'shutdown timed out: exiting',
      );
      flushLogs(logger);
      killSelf();
    }, timeoutMs);
    timer.unref();
    if (service === null) starting.abort(new StoppedWhileStarting(signal));
    else stopStarted(service, logger);
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));

  // Loaded once the configuration holds: every slice's modules take seconds to load (2.5 CPU s
  // here), and a refused configuration or role is told at once instead of after them.
  service = await import('./service.ts')
    .then(({ startService }) => {
      starting.signal.throwIfAborted();
      return startService(config, roles, logger, { signal: starting.signal });
    })
    .catch((err: unknown) => {
      if (starting.signal.reason instanceof StoppedWhileStarting) {
        // Whatever the start ended with, it ended because it was asked to: what it opened is closed.
        logger.info({ signal: starting.signal.reason.signal, during: 'start' }, 'service stopped');
        exitGuarded(0, logger);
      }
      return failedToStart(logger, err);
    });
  // The signal came as the start's last step ended: it is stopped as a started service is.
  if (starting.signal.aborted) stopStarted(service, logger);
}

/** The reason a start was ended: the signal that asked the process to stop while it started. */
class StoppedWhileStarting extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`${signal} while starting: the start is stopped`);
    this.name = 'StoppedWhileStarting';
  }
}

/** A started service's stop (its `service stopped` line), then exit 0, or 1 when the stop failed. */
function stopStarted(service: RunningService, logger: Logger): void {
  service.stop().then(
    () => exitGuarded(0, logger),
    (err: unknown) => {
      logger.error({ err }, 'shutdown failed');
      exitGuarded(1, logger);
    },
  );
}

/**
 * A start that failed once the logger exists is told as the service's other lines are: one pino
 * line at fatal (the error's message, its stack under `err`), then exit 1. A refused setting
 * found by a role (ConfigError) stays the plain message on stderr, as at the top of main.
 */
function failedToStart(logger: Logger, err: unknown): never {
  if (err instanceof ConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
  // A path it may not use (a DATA_DIR of another user's) is named with what to do.
  logger.fatal(
    { err },
    `failed to start: ${pathRefusal(err) ?? (err instanceof Error ? err.message : String(err))}`,
  );
  flushLogs(logger);
  process.exit(1);
}

/**
 * The logger holds lines before it writes them: a line logged just before SIGKILL would be lost
 * with the process, so the last lines are written out synchronously first (the access lines of the
 * turn in progress, then what the stream holds, see BufferedStdout.flushBeforeKill).
 */
function flushLogs(logger: Logger): void {
  try {
    flushAccessLines();
    const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as
      | { flushBeforeKill?: () => void; flushSync?: () => void }
      | undefined;
    if (stream?.flushBeforeKill) stream.flushBeforeKill();
    else stream?.flushSync?.();
  } catch {
    // A destination without flushSync, or stdout gone: nothing more can be done.
  }
}

/**
 * process.exit (and process.reallyExit) can hang for ever: before the process ends, Node joins
 * the libuv thread-pool threads, and one blocked in native code never returns: an LMDB write
 * waiting on the lock of a process that is stopped (SIGSTOP) kept a process alive 16 minutes after
 * "shutdown timed out: exiting". A signal of our own is the only end nothing can wait on
 * (flushLogs first, so the line before it is out).
 */
function killSelf(): never {
  process.kill(process.pid, 'SIGKILL');
  // SIGKILL to oneself is delivered before kill(2) returns; nothing runs past this.
  throw new Error('unreachable: SIGKILL did not end the process');
}

/** How long an exit may take before its watchdog ends the process. */
const EXIT_WATCHDOG_MS = 3000;

/**
 * A clean exit with the same guarantee: a watchdog SIGKILLs this process if its exit has not
 * ended 3 s later, and ends with it otherwise (services/shared/exit-watchdog.ts). The watchdog's
 * fatal line names it and what the process still held as it called exit.
 */
function exitGuarded(code: number, logger: Logger): never {
  try {
    startExitWatchdog(process.pid, EXIT_WATCHDOG_MS, {
      ...logger.bindings(),
      timer: 'exit-watchdog',
      afterMs: EXIT_WATCHDOG_MS,
      exitCode: code,
      open: openResources(),
      msg: `exit not ended ${EXIT_WATCHDOG_MS} ms after process.exit(${code}): killing the process`,
    });
  } catch {
    // No watchdog (no process could be started): an exit that may hang is worse than this one.
    killSelf();
  }
  process.exit(code);
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
