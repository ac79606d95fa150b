import { pino } from 'pino';
import { CACHE_LOG_COMPONENT, CacheUnavailableError } from '../../adapters/cache/port.ts';
import { DependencyRefusedError } from '../../adapters/dependency-refused.ts';
import {
  EventStoreUnavailableError,
  NewerLogError,
  NoEventStoreError,
} from '../../adapters/event-store/port.ts';
import { exitFlushed } from './exit-flushed.ts';
import { pathRefusal } from './path-refusal.ts';

/**
 * A failure an operator command expects and can name (another run came first, a store it could
 * not open): its message says what failed and what to do, and the command line prints it as one
 * line, with no stack trace.
 */
export class CommandFailedError extends Error {
  override readonly name = 'CommandFailedError';
}

/**
 * The one line an operator command line prints for a failure it expects, or null for anything
 * else: a bug, which the command line prints with its stack so that it stays visible. Expected
 * are a CommandFailedError, a cache or event store that does not answer (Redis, PostgreSQL,
 * KurrentDB down: run the command again once it does), a server refused at first contact, a log
 * written by a newer version, and a path the process may not use
 * (DATA_DIR, DEST, --out without permission, on a read-only or full disk).
 */
export function expectedFailure(err: unknown): string | null {
  if (err instanceof CommandFailedError) return err.message;
  if (err instanceof CacheUnavailableError)
    return `${err.message}: start Redis or correct REDIS_URL, then run the command again`;
  if (err instanceof EventStoreUnavailableError)
    return `${err.message}: run the command again once the event store answers`;
  // Their messages already say what to do (correct a setting, start the server; run the newer
  // version, or restore a backup).
  if (err instanceof DependencyRefusedError || err instanceof NewerLogError) return err.message;
  return pathRefusal(err);
}

/** What a command line prints for `err`: the expected failure's line, else the error with its stack. */
export function failureText(err: unknown): string {
  return expectedFailure(err) ?? (err instanceof Error ? (err.stack ?? String(err)) : String(err));
}

/**
 * The logger an operator command line hands its stores: warnings and up, on stderr, written at
 * once. A buffered destination flushes at exit and retries a write to a closed pipe forever, so
 * a command whose stderr reader went away (`2>&1 | head -1`) would never exit.
 *
 * The cache's lines are left out: they follow its connection (Redis down, retried in the
 * background), which matters to a service that keeps running. A command that needs the cache is
 * refused with a CacheUnavailableError naming the same cause, told in one line (expectedFailure),
 * as a store that cannot be opened is; one that does not need it has nothing to say about it.
 */
export const commandLineLogger = () =>
  pino(
    {
      level: 'warn',
      onChild: (child) => {
        if (child.bindings().component === CACHE_LOG_COMPONENT) child.level = 'silent';
      },
    },
    pino.destination({ dest: 2, sync: true }),
  );

/**
 * What `open` opens (a command line's stores), or the end of the process with what failureText
 * prints on stderr: exit 1 for the expected failure's one line (a server down, a DATA_DIR this
 * user may not write, a log written by a newer version) or the error with its stack (a bug); exit
 * 2, as for a usage error, for a log a command that only reads would not create (nothing was read).
 */
export async function openedOrExit<T>(open: () => Promise<T>): Promise<T> {
  try {
    return await open();
  } catch (err) {
    if (err instanceof NoEventStoreError) {
      process.stderr.write(`${err.message}\n`);
      return exitFlushed(2);
    }
    process.stderr.write(`${failureText(err)}\n`);
    return exitFlushed(1);
  }
}
