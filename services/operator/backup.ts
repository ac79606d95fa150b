// First: an older Node is refused in one line before any other module runs.
import '../shared/node-version.ts';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { NoEventStoreError } from '../../adapters/event-store/port.ts';
import type { Config } from '../../contracts/config.ts';
import { requireExistingStore } from '../adapters.ts';
import { commandLineConfig } from '../shared/cli-config.ts';
import { failureText } from '../shared/cli-failure.ts';
import { parseArgsRefusal } from '../shared/command-line.ts';
import { exitFlushed, usageIfAsked } from '../shared/exit-flushed.ts';
import { invocation, usageHint } from '../shared/invocation.ts';

export const USAGE = `usage: ${invocation('backup')} DEST

  A consistent, compacted copy of the embedded event log (EVENT_STORE=lmdb: DATA_DIR/events, with
  its projection snapshots and export rows), taken while the service runs. DEST must be a new or
  empty directory; the copy is DEST/events/data.mdb, a DATA_DIR of its own: to restore, stop the
  service and put DEST/events in place of DATA_DIR/events (deploy/README.md, Backups).
  Prints the backup point: the log's head position and the event there.
  PostgreSQL and KurrentDB are backed up with their own tools.`;

class UsageError extends Error {}
/**
 * A DEST or store the command refuses though it was typed right (a store it does not copy, a DEST
 * in use): exit 2 as for usage, told in its one line without the usage text after it.
 */
class RefusedError extends Error {}

/** What the command refuses before it copies anything (a UsageError or RefusedError, exit 2). */
function refuse(config: Pick<Config, 'EVENT_STORE' | 'DATA_DIR'>, dest: string | undefined): string {
  if (!dest) throw new UsageError('backup needs DEST, a new or empty directory');
  if (config.EVENT_STORE === 'postgres')
    throw new RefusedError(
      'EVENT_STORE=postgres: the log is in PostgreSQL; back it up with its tools (continuous WAL ' +
        'archiving and base backups for point-in-time recovery, or pg_dump), see deploy/README.md, Backups',
    );
  if (config.EVENT_STORE === 'kurrentdb')
    throw new RefusedError(
      'EVENT_STORE=kurrentdb: the log is in KurrentDB; back it up with its tools. DATA_DIR/projections ' +
        'holds only snapshots, rebuilt from the log when missing',
    );
  if (config.EVENT_STORE === 'memory') throw new RefusedError('EVENT_STORE=memory keeps nothing to back up');
  requireExistingStore(config);
  const target = resolve(dest);
  if (existsSync(target)) {
    if (!statSync(target).isDirectory()) throw new RefusedError(`${dest} exists and is not a directory`);
    if (readdirSync(target).length > 0)
      throw new RefusedError(`${dest} is not empty: a backup goes to a new or empty directory`);
  }
  if (target === resolve(config.DATA_DIR) || target.startsWith(`${resolve(config.DATA_DIR, 'events')}/`))
    throw new RefusedError(`${dest} is the service's own DATA_DIR: back up elsewhere`);
  return target;
}

const argv = process.argv.slice(2);
await usageIfAsked(argv, USAGE);
let code = 0;
try {
  const { positionals } = (() => {
    try {
      return parseArgs({ args: argv, allowPositionals: true, strict: true, options: {} });
    } catch (err) {
      throw new UsageError(parseArgsRefusal('backup', err));
    }
  })();
  if (positionals.length > 1) throw new UsageError(`backup takes one DEST: ${positionals.join(' ')}`);
  // A refused setting is told in the service's words, exit 1.
  const config = await commandLineConfig(1);
  const dest = refuse(config, positionals[0]);
  const { backupLmdbEnvironment } = await import('../../adapters/event-store/lmdb-backup.ts');
  const started = performance.now();
  const events = await backupLmdbEnvironment(join(config.DATA_DIR, 'events'), join(dest, 'events'));
  process.stdout.write(
    `${JSON.stringify({ backup: dest, events, ms: Math.round(performance.now() - started) }, null, 2)}\n`,
  );
} catch (err) {
  const usage = err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS');
  // Refused before anything was copied (a store it does not copy, a DEST in use, no log): one line.
  const refused = err instanceof NoEventStoreError || err instanceof RefusedError;
  code = usage || refused ? 2 : 1;
  process.stderr.write(
    usage
      ? `${(err as Error).message}\n${usageHint('backup')}\n`
      : refused
        ? `${err.message}\n`
        : // An expected failure (a DEST this user may not write) in one line; a bug with its stack.
          `backup failed: ${failureText(err)}\n`,
  );
}
// Only once the output is all written: a pipe takes 64 KiB at a time.
await exitFlushed(code);
