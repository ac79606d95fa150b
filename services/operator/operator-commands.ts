import { parseArgs } from 'node:util';
import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { Config } from '../../contracts/config.ts';
import { Plan } from '../../contracts/events.ts';
import { changeKeyPlan, issueKey, KeyRuleError, revokeKey } from '../keys/key-commands.ts';
import { findById, type KeyRecord } from '../keys/key-registry.ts';
import { foldKeyRegistry } from '../keys/registry-fold.ts';
import { rebuildQuotaGeneration } from '../metering/quota-rebuild.ts';
import {
  filterLedger,
  ledgerCsv,
  ledgerNdjson,
  ledgerTotals,
  PAYMENT_STATUSES,
  readLedger,
} from '../payments/ledger-report.ts';
import type { PaymentStatus } from '../payments/payment-state.ts';
import { CommandFailedError } from '../shared/cli-failure.ts';
import { optionsRefusal, parseArgsRefusal, unknownCommandRefusal } from '../shared/command-line.ts';
import { invocation } from '../shared/invocation.ts';
import { describeReseal, resealSecrets } from '../webhooks/reseal.ts';
import type { SecretBox } from '../webhooks/secret-box.ts';

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * The service the CLI asked reads another event log than the CLI wrote to (another DATA_DIR or
 * store): the change is recorded, but not where that service looks. The CLI prints why and exits 1.
 */
export class OtherLogError extends Error {
  override readonly name = 'OtherLogError';
}

/**
 * The command did what it could and left part of it undone (reseal-webhook-secrets with secrets
 * no configured key opens): `output`, what it did, goes to stdout, the message, what is left and
 * what to do, to stderr, and the CLI exits 1 so that a script stops there.
 */
export class UnfinishedError extends Error {
  override readonly name = 'UnfinishedError';
  constructor(
    message: string,
    readonly output: string,
  ) {
    super(message);
  }
}

/** The usage text, naming the command as it was started (`npm run keys --` or its node command). */
export const USAGE = `usage: ${invocation('keys')} <command>
  create --plan <free|starter|pro> --owner <who>   issue a key (printed once)
  list [--all]                                     keys with id, prefix, plan, owner (--all: with revoked)
  plan <keyId> <free|starter|pro>                  move a key to another plan
  revoke <keyId> [--reason <text>]                 revoke a key for good
  rebuild-quota                                    rebuild the shared cache's quota counters (CACHE=redis)
                                                   from the event log (safe under traffic: a new
                                                   generation, then a switch)
  payments [--from <date>] [--to <date>] [--status <status>] [--format <summary|csv|ndjson>]
                                                   the x402 payments ledger: per payment, what was sold,
                                                   payer, amount, status and settlement transaction;
                                                   --from inclusive, --to exclusive (ISO 8601, UTC when
                                                   no zone is given); summary (default): counts and
                                                   USDC per status
  reseal-webhook-secrets                           seal every webhook secret under WEBHOOK_MASTER_KEY
                                                   (one event per subscription not under it yet),
                                                   so WEBHOOK_MASTER_KEYS_PREVIOUS can be emptied;
                                                   exit 1, naming them, when a secret opens under
                                                   no configured key
Every command but create refuses a DATA_DIR (EVENT_STORE=lmdb) or POSTGRES_SCHEMA (postgres) that holds no event log.`;

/**
 * The commands that read a log that must exist: every one but `create`, which may start a new log
 * (keys can be issued before the service first starts). On a DATA_DIR or PostgreSQL schema holding
 * no log they are refused (openAdapters' existingLog, exit 2) rather than create an empty one and
 * answer as if it were the service's.
 */
export const READS_EXISTING_LOG = new Set([
  'list',
  'plan',
  'revoke',
  'rebuild-quota',
  'payments',
  'reseal-webhook-secrets',
]);

/** A command line read as USAGE has it (parseCommandLine): a command of COMMANDS, its words, its options. */
export interface CommandLine {
  readonly command: string;
  readonly positional: readonly string[];
  readonly named: Readonly<Record<string, string | boolean | undefined>>;
}

/**
 * The command line read as USAGE has it, or a UsageError naming what is not (see flags): the CLI
 * reads it once, before it reads its settings or opens a store, and runs what it read (a `create`
 * refused here creates no log, nor does an unknown command: a typo on a DATA_DIR holding no log
 * would otherwise leave an empty one there).
 */
export function parseCommandLine(argv: readonly string[]): CommandLine {
  const [command, ...rest] = argv;
  const { positional, named } = flags(command, rest);
  return { command: command!, positional, named };
}

/**
 * What the CLI refuses before it opens any adapter (a UsageError, exit 2): `rebuild-quota` on the
 * in-process cache, which would rebuild the counters of the CLI's own throwaway cache while the
 * service's stay as they were (the command needs the shared one, CACHE=redis).
 */
export function refuseBeforeOpening(command: string | undefined, config: Pick<Config, 'CACHE'>): void {
  if (command === 'rebuild-quota' && config.CACHE !== 'redis') {
    throw new UsageError(
      'rebuild-quota rebuilds the quota counters in the shared cache: set CACHE=redis (and REDIS_URL) ' +
        `as the service has them. With CACHE=${config.CACHE} the counters live inside each service ` +
        'process, out of reach of this command (a restart of the service rebuilds them from the log)',
    );
  }
}

/**
 * What each command takes after its name (USAGE): its words, besides options, and its options. A
 * word more is refused (`list --all extra`, `revoke <keyId> <keyId>`), and so is an option of
 * another command (`list --owner acme` would list every owner's keys as if filtered), not ignored.
 * A command not listed is refused as unknown, naming the ones listed (see unknownCommand).
 */
const COMMANDS: Record<string, { words: readonly string[]; options: readonly (keyof typeof OPTIONS)[] }> = {
  create: { words: [], options: ['plan', 'owner'] },
  list: { words: [], options: ['all'] },
  plan: { words: ['<keyId>', `<${Plan.options.join('|')}>`], options: [] },
  revoke: { words: ['<keyId>'], options: ['reason'] },
  'rebuild-quota': { words: [], options: [] },
  payments: { words: [], options: ['from', 'to', 'status', 'format'] },
  'reseal-webhook-secrets': { words: [], options: [] },
};

const OPTIONS = {
  plan: { type: 'string' },
  owner: { type: 'string' },
  reason: { type: 'string' },
  all: { type: 'boolean' },
  from: { type: 'string' },
  to: { type: 'string' },
  status: { type: 'string' },
  format: { type: 'string' },
} as const;

/**
 * The command line after the command's name, read as USAGE has it: an unknown command, an unknown
 * option, one missing its value, an option taking a value given twice (`--owner a --owner b`: which
 * one was meant?), an option the command does not take and a word it does not take are usage errors
 * naming it.
 */
function flags(command: string | undefined, args: string[]): Omit<CommandLine, 'command'> {
  // Own keys only: `toString` or `__proto__` is no command.
  const takes = command !== undefined && Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (takes === undefined) throw new UsageError(unknownCommandRefusal(command, Object.keys(COMMANDS)));
  const parsed = (() => {
    try {
      return parseArgs({ args, allowPositionals: true, tokens: true, options: OPTIONS });
    } catch (err) {
      // Unknown flags and missing values come back as usage errors.
      throw new UsageError(parseArgsRefusal(command!, err));
    }
  })();
  const { positionals, values, tokens } = parsed;
  const refusal = optionsRefusal(command!, OPTIONS, takes.options, tokens);
  if (refusal !== null) throw new UsageError(refusal);
  const words = takes.words;
  if (positionals.length > words.length) {
    const extra = positionals.slice(words.length).map((word) => JSON.stringify(word));
    throw new UsageError(
      `unexpected argument${extra.length > 1 ? 's' : ''} ${extra.join(' ')} (${command} takes ${words.length === 0 ? 'no argument but its options' : words.join(' ')})`,
    );
  }
  return { positional: positionals, named: values };
}

const isWords = (line: CommandLine | readonly string[]): line is readonly string[] => Array.isArray(line);

/** An ISO 8601 date or time as ms since the epoch (UTC when it names no zone); undefined when absent. */
function instant(flag: string, value: string | boolean | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  const zoned = /^\d{4}-\d{2}-\d{2}$/.test(text) || /(Z|[+-]\d{2}:?\d{2})$/i.test(text) ? text : `${text}Z`;
  const ms = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(zoned) : Number.NaN;
  // Date.parse rolls a day past the month's end over (2026-02-30 is 2026-03-02): a day that does
  // not exist is refused, not read as another.
  const [year = 0, month = 0, day = 0] = text.slice(0, 10).split('-').map(Number);
  const date = new Date(Date.UTC(year, month - 1, day));
  if (date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day || Number.isNaN(ms))
    throw new UsageError(
      `${flag} must be an ISO 8601 date or time, e.g. 2026-11-01 or 2026-11-01T12:00Z (got ${text})`,
    );
  return ms;
}

/** A plan named by `what` (`--plan`, or `plan`'s second argument): missing is told as missing. */
function plan(value: string | boolean | undefined, what: string): Plan {
  const plans = Plan.options.join(', ');
  if (value === undefined) throw new UsageError(`${what} is required: one of ${plans}`);
  const parsed = Plan.safeParse(value);
  if (!parsed.success) throw new UsageError(`${what} must be one of ${plans} (got ${String(value)})`);
  return parsed.data;
}

async function existing(store: EventStore, keyId: string | undefined): Promise<KeyRecord> {
  if (!keyId) throw new UsageError('a key id is required (see `list`)');
  const record = findById(await foldKeyRegistry(store), keyId);
  // The command was typed right; the id names no key on this log: one line saying where the ids
  // are, not the usage text (exit 1, as for any refused state).
  if (!record)
    throw new CommandFailedError(
      `no key ${keyId} on this event log: \`${invocation('keys')} list --all\` lists the key ids`,
    );
  return record;
}

function row(r: KeyRecord): string {
  const state = r.revoked ? `revoked ${r.revokedAt}` : 'active';
  return [r.keyId, `${r.prefix}…`, r.plan.padEnd(7), state.padEnd(8), r.via.padEnd(8), r.owner].join('  ');
}

/**
 * Runs one operator command (a command line parseCommandLine read, or its words, read here) and
 * returns what to print. Pure of process and console. A key change
 * returns once `applied` says the running service has it (the CLI asks the service's /readyz), so
 * the next call already sees it; what the change did is handed to `applied.shown` before that wait.
 */
export async function runOperatorCommand(
  line: CommandLine | readonly string[],
  deps: {
    store: EventStore;
    cache: Cache;
    /** The configured master keys, for reseal-webhook-secrets (made only when that runs). */
    secrets?: () => SecretBox;
    settleMs?: number;
    /**
     * The wait for the running service after a key change: `shown` is handed what the change did
     * first (the CLI prints it at once, so a key shown once is not lost to a Ctrl-C during a wait
     * of up to 10 s), then `until` waits; what it answers, when not null, is the command's answer.
     */
    applied?: {
      shown: (text: string) => void;
      until: (position: number) => Promise<string | null>;
    };
  },
): Promise<string> {
  const done = async (position: number, lines: string[]) => {
    if (!deps.applied) return lines.join('\n');
    deps.applied.shown(lines.join('\n'));
    return (await deps.applied.until(position)) ?? '';
  };
  const { command, positional, named } = isWords(line) ? parseCommandLine(line) : line;
  try {
    switch (command) {
      case 'create': {
        const owner = named.owner;
        if (typeof owner !== 'string' || owner.trim() === '')
          throw new UsageError('--owner <who> is required');
        const issued = await issueKey(deps.store, {
          plan: plan(named.plan, '--plan <plan>'),
          owner: owner.trim(),
          via: 'operator',
        });
        return done(issued.position, [
          `key:    ${issued.key}`,
          `id:     ${issued.keyId}`,
          `plan:   ${issued.plan}`,
          `owner:  ${issued.owner}`,
          'Shown once: only its hash is stored. Send it as "Authorization: Bearer <key>".',
        ]);
      }
      case 'list': {
        const registry = await foldKeyRegistry(deps.store);
        const records = Object.values(registry.byHash)
          .filter((r) => named.all === true || !r.revoked)
          .sort((a, b) => a.issuedAt.localeCompare(b.issuedAt));
        return records.length === 0 ? 'no keys' : records.map(row).join('\n');
      }
      case 'plan': {
        const record = await existing(deps.store, positional[0]);
        const to = plan(positional[1], 'a plan after the key id');
        // On that plan already (plans re-applied after a restore, a script run twice): what was
        // asked holds, so it succeeds (exit 0), says so and appends nothing, as revoke does. A
        // revoked key stays refused (key_revoked, exit 1): the plan asked does not hold there.
        const already = `${record.keyId}: is already on ${to}; nothing changed`;
        if (!record.revoked && record.plan === to) return already;
        try {
          const position = await changeKeyPlan(deps.store, record.stream, record.keyId, to);
          return done(position, [`${record.keyId}: ${record.plan} -> ${to}`]);
        } catch (err) {
          // Moved to that plan by another run between the read above and this append.
          if (err instanceof KeyRuleError && err.code === 'plan_unchanged') return already;
          throw err;
        }
      }
      case 'revoke': {
        const record = await existing(deps.store, positional[0]);
        const reason = typeof named.reason === 'string' ? named.reason : 'revoked by operator';
        // Revoked already (a script run twice, or past a partial run): what was asked holds, so
        // it succeeds (exit 0), says so, and appends nothing; the first revocation's time stands.
        const already = (at: string | null | undefined) =>
          `${record.keyId}: was already revoked${at ? ` (at ${at})` : ''}; nothing changed`;
        if (record.revoked) return already(record.revokedAt);
        try {
          const position = await revokeKey(deps.store, record.stream, record.keyId, reason);
          return done(position, [`${record.keyId}: revoked (${reason})`]);
        } catch (err) {
          // Revoked by another run between the read above and this append.
          if (err instanceof KeyRuleError && err.code === 'key_revoked') {
            const now = findById(await foldKeyRegistry(deps.store), record.keyId);
            return already(now?.revokedAt);
          }
          throw err;
        }
      }
      case 'reseal-webhook-secrets': {
        if (!deps.secrets) throw new Error('no webhook master key configured here');
        const { done, left } = describeReseal(await resealSecrets(deps.store, deps.secrets()));
        if (left !== null) throw new UnfinishedError(left, done);
        return done;
      }
      case 'rebuild-quota': {
        const outcome = await rebuildQuotaGeneration({
          store: deps.store,
          cache: deps.cache,
          ...(deps.settleMs === undefined ? {} : { settleMs: deps.settleMs }),
        });
        if (!outcome.switched)
          throw new CommandFailedError(
            'quota: another rebuild (or a loss of the cache) came first; nothing switched, run it again',
          );
        return [
          `quota: generation ${outcome.generation} live (replaced ${outcome.previous ?? 'none'})`,
          `${outcome.windows} open windows from ${outcome.events} events up to position ${outcome.position},`,
          `then ${outcome.replayed} debits made meanwhile replayed`,
        ].join(' ');
      }
      case 'payments': {
        const format = named.format ?? 'summary';
        if (format !== 'summary' && format !== 'csv' && format !== 'ndjson')
          throw new UsageError(`--format must be one of summary, csv, ndjson (got ${String(format)})`);
        const status = named.status;
        if (status !== undefined && !PAYMENT_STATUSES.includes(status as PaymentStatus))
          throw new UsageError(
            `--status must be one of ${PAYMENT_STATUSES.join(', ')} (got ${String(status)})`,
          );
        const filter = {
          from: instant('--from', named.from),
          to: instant('--to', named.to),
          status: status as PaymentStatus | undefined,
        };
        // A window that ends where or before it starts holds no payment: its empty totals would
        // read as a quiet period, not as the two dates swapped.
        if (filter.from !== undefined && filter.to !== undefined && filter.from >= filter.to)
          throw new UsageError(
            `--from must be before --to (--to is exclusive; got --from ${String(named.from)} --to ${String(named.to)})`,
          );
        const rows = filterLedger(await readLedger(deps.store), filter);
        if (format === 'csv') return ledgerCsv(rows);
        if (format === 'ndjson') return ledgerNdjson(rows);
        return ledgerTotals(rows);
      }
      default:
        throw new UsageError(unknownCommandRefusal(command, Object.keys(COMMANDS)));
    }
  } catch (err) {
    // A key's state refuses the change (a plan change of a revoked key): one line, not the usage
    // text.
    if (err instanceof KeyRuleError) throw new CommandFailedError(err.message);
    throw err;
  }
}

/**
 * An answer that polling will not change: a client error other than a timeout or a rate limit
 * (401, 403, 404 from a proxy or another server at that address). A 5xx (a proxy's 502 while the
 * service restarts) and 408/429 are polled again.
 */
function refusedForGood(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/**
 * Waits until the service at `baseUrl` has folded the key change at `position` into its key
 * registry (`projection:key-registry` of its /readyz), polling every 50 ms for at most `timeoutMs`.
 * Null once it has; a note when no service answers there (the change applies when one starts) or
 * when it has not caught up in time. Only a refused connection means no service: a /readyz slower
 * than `probeTimeoutMs` (a busy or just-started service) or an answer that is not its readiness
 * JSON (a proxy's 502 page) is polled again until `timeoutMs`; a 4xx without it (a proxy that
 * refuses /readyz) is told at once. A position only means something in
 * one log: when the service names its log (`log`, the id of its first event,
 * adapters/event-store/log-identity.ts) and it is not `ourLog`, the one the change was written to,
 * it throws OtherLogError at once rather than compare positions of two logs (a service elsewhere
 * would never know the key).
 */
export async function serviceApplied(
  baseUrl: string,
  position: number,
  timeoutMs = 10_000,
  ourLog: string | null = null,
  probeTimeoutMs = 2_000,
): Promise<string | null> {
  const url = `${baseUrl}/readyz`;
  const deadline = Date.now() + timeoutMs;
  let seen: number | null = null;
  // Why the last probe told nothing, while no probe has read a checkpoint.
  let unanswered: string | null = null;
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(probeTimeoutMs) });
      const body = (await res.json().catch(() => undefined)) as
        | { checks?: Record<string, { checkpoint?: number; log?: string | null }> }
        | undefined;
      if (body?.checks === undefined && refusedForGood(res.status)) {
        // A proxy in front that refuses /readyz (deploy/README.md, Security) answers the same
        // however long it is asked: said at once, with what to set, rather than after timeoutMs.
        return (
          `${url} answered ${res.status}: the readiness of the service there cannot be read from here ` +
          '(a proxy in front that refuses /readyz?). The change is on the event log, and every service ' +
          "reading that log applies it; set PUBLIC_BASE_URL to an api's own address (http://<host>:<PORT>) " +
          'to wait for it'
        );
      }
      if (body === undefined) {
        unanswered = `answered ${res.status} without its readiness JSON`;
      } else {
        const registry = body.checks?.['projection:key-registry'];
        const checkpoint = registry?.checkpoint;
        if (checkpoint === undefined) return `${url} keeps no key registry: not waiting for it`;
        if (ourLog !== null && registry?.log !== undefined && registry.log !== ourLog) {
          throw new OtherLogError(
            `the service at ${url} reads another event log than this command wrote to ` +
              `(its first event ${registry.log ?? 'none: its log is empty'}, ours ${ourLog}): it will not see ` +
              'this change. Run the command with the DATA_DIR and EVENT_STORE settings of that service ' +
              '(or PUBLIC_BASE_URL/PORT naming the service that reads this log)',
          );
        }
        if (checkpoint >= position) return null;
        seen = checkpoint;
      }
    } catch (err) {
      if (err instanceof OtherLogError) throw err;
      if ((err as Error).name === 'TimeoutError') unanswered = `did not answer within ${probeTimeoutMs} ms`;
      else if (seen === null && unanswered === null)
        return (
          `no service answered at ${url}, the service this command waits for (PUBLIC_BASE_URL, else ` +
          'http://localhost:<PORT>; set either to reach one on another host): the change is on the event log, ' +
          'and every service reading that log applies it once running'
        );
    }
    if (Date.now() >= deadline) {
      if (seen === null)
        return `${url} ${unanswered ?? 'did not answer'} (polled for ${timeoutMs} ms): the change applies once the service has folded position ${position}`;
      return `the service at ${url} has not applied it yet (key registry at ${seen}, change at ${position}): it will`;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
