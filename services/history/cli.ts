// First: an older Node is refused in one line before any other module runs.
import '../shared/node-version.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { feedOptionsFromConfig, selectFeed } from '../../adapters/market/select.ts';
import type { Config } from '../../contracts/config.ts';
import { type Adapters, openAdapters } from '../adapters.ts';
import { commandLineConfig } from '../shared/cli-config.ts';
import { commandLineLogger, failureText, openedOrExit } from '../shared/cli-failure.ts';
import { exitFlushed, usageIfAsked } from '../shared/exit-flushed.ts';
import { usageHint } from '../shared/invocation.ts';
import {
  deploymentReplay,
  ExportInterruptedError,
  ForeignCursorError,
  NoExportError,
  runHistoryCommand,
  USAGE,
  UsageError,
  verifyExitCode,
} from './cli-commands.ts';
import { MalformedRowError } from './files.ts';
import { HistoryQueryError } from './query.ts';

/** The analyst's command line (`npm run history -- export|verify|score …`). */
const argv = process.argv.slice(2);
await usageIfAsked(argv, USAGE);
let adapters: Adapters | null = null;
let feed: MarketFeed | null = null;
/** The deployment's replay once decided (null: wall time, no replay on the log). */
let replay: MarketFeed | null | undefined;
let config: Config | null = null;
// A refused setting is told in the service's words, exit 2 as a DATA_DIR without a log (verify's
// 1 means a broken chain): nothing was read.
const configured = async (): Promise<Config> => {
  config ??= await commandLineConfig(2);
  return config;
};
let code = 0;
/** What a command leaves until its output is written (a finished export's checkpoint). */
const afterOutput: (() => void)[] = [];
try {
  const openStore = async (): Promise<EventStore> => {
    const config = await configured();
    // Every history command only reads: a DATA_DIR or PostgreSQL schema without a log is refused,
    // not created (exit 2); a store that cannot be opened (a server down, a log written by a
    // newer version): one line, exit 1.
    adapters ??= await openedOrExit(() => openAdapters(config, commandLineLogger(), { existingLog: true }));
    return adapters.eventStore;
  };
  // The deployment's replay clock (REPLAY_ANCHOR, else the log's record, read and not written),
  // or null for wall time: a read from the store reveals on it. No venue is asked.
  const openReplay = async (): Promise<MarketFeed | null> => {
    if (replay === undefined) replay = await deploymentReplay(await configured(), await openStore());
    return replay;
  };
  const output = await runHistoryCommand(argv, {
    progress: process.stderr,
    // The feed the deployment serves from, asked only whether it serves a venue or timeframe (an
    // export's filter the log holds none of): opened once, nothing written, its choice not logged.
    // A log a replay ran on (deploymentReplay) is judged by that replay, the one a read reveals
    // on; FEED=replay with no replay on the log by the configured data (its clock not run). Only
    // FEED=live, and FEED=auto on a log no replay ran on (a live deployment's), ask the venues:
    // auto probes them as the service does, replaying when none answers.
    async openFeed() {
      const config = await configured();
      if (config.FEED !== 'live') {
        const deployed = await openReplay();
        if (deployed !== null) return deployed;
      }
      const options = feedOptionsFromConfig(config);
      feed ??= (await selectFeed({ ...options, replay: { ...options.replay, run: false } })).feed;
      return feed;
    },
    // The venues' answers are waited for as long as the service waits for them.
    feedProbeTimeoutMs: async () => (await configured()).FEED_PROBE_TIMEOUT_MS,
    openReplay,
    openStore,
    afterOutput: (finish) => afterOutput.push(finish),
  });
  // A reader that went away (`score … | head`): the rest has nowhere to go, which is no crash (an
  // unhandled EPIPE printed a stack trace and exited 1). The write's callback is told.
  process.stdout.on('error', () => {});
  // Handed to the OS first: killed before, a finished export keeps its checkpoint for --resume.
  const written = await new Promise<boolean>((resolve) =>
    process.stdout.write(`${output}\n`, (err) => resolve(!err)),
  );
  if (written) for (const finish of afterOutput) finish();
  if (argv[0] === 'verify') {
    const report = JSON.parse(output) as { ok: boolean; incomplete?: string };
    code = verifyExitCode(report);
    // A file of no row, of commitments only, of outcomes a --data folder holds none of (or short
    // of its trailer's count) verified nothing: said in words too.
    if (report.incomplete) process.stderr.write(`${report.incomplete}\n`);
  }
} catch (err) {
  const usage = err instanceof UsageError || err instanceof HistoryQueryError;
  code = usage ? 2 : 1;
  // A usage error is its one line and where the usage is (--help): some thirty lines of usage
  // under it would bury the line that says what was wrong.
  // An interrupted export says what failed and how to go on; a stack trace would bury that. An
  // expected failure (a store down, an --out this user may not write) is one line too; a bug keeps
  // its stack.
  // A file with a malformed or cut line (verify reports it as its first broken link; score can only
  // stop there) is the file's fault, not a bug: its place and what to do, in one line. A PATH that
  // holds no export is the path's (exit 2): that line alone, the usage would not say which to give.
  const told =
    usage ||
    err instanceof ExportInterruptedError ||
    err instanceof ForeignCursorError ||
    err instanceof MalformedRowError;
  process.stderr.write(
    usage && !(err instanceof NoExportError)
      ? `${(err as Error).message}\n${usageHint('history')}\n`
      : told
        ? `${(err as Error).message}\n`
        : `${failureText(err)}\n`,
  );
} finally {
  await (adapters as Adapters | null)?.close();
  await (feed as MarketFeed | null)?.close();
  await (replay as MarketFeed | null | undefined)?.close();
}
// Only once the output is all written: a pipe takes 64 KiB at a time.
await exitFlushed(code);
