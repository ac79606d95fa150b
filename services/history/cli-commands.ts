import { once } from 'node:events';
import {
  closeSync,
  createWriteStream,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { SingleBar } from 'cli-progress';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { makeDirectory } from '../../adapters/make-directory.ts';
import { MarketFileError } from '../../adapters/market/csv.ts';
import { unservedAnswer } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { openReplayFeed } from '../../adapters/market/replay.ts';
import { recordedAnchor } from '../../adapters/market/replay-anchor.ts';
import { feedOptionsFromConfig } from '../../adapters/market/select.ts';
import type { Config } from '../../contracts/config.ts';
import {
  HISTORY_COLUMNS,
  HISTORY_FORMATS,
  type HistoryFormat,
  type HistoryRow,
  HistoryTrailer,
  TRACK_RECORD_WINDOWS,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import {
  EXCHANGES,
  type Exchange,
  type MarketKey,
  TIMEFRAMES,
  type Timeframe,
} from '../../contracts/market.ts';
import { parseVerdictStream, verdictStream } from '../engine/verdict-recorder.ts';
import { CommandFailedError } from '../shared/cli-failure.ts';
import { optionsRefusal, parseArgsRefusal, unknownCommandRefusal } from '../shared/command-line.ts';
import { invocation } from '../shared/invocation.ts';
import { revealClock } from '../shared/reveal-clock.ts';
import { AnchorCheck, type ChainAnchor, readChainAnchors } from './anchor-check.ts';
import { type ChainReport, scoreRows, verifyRows } from './audit.ts';
import { decodeCursor, tagMatches } from './cursor.ts';
import {
  formatOf,
  type MalformedRowError,
  parseCsvLine,
  readExport,
  readExportPastMalformed,
  type TrailerCount,
} from './files.ts';
import { HistoryQuerySchema, historyFilter, parseTime } from './query.ts';
import { NoMarketDataError, OutcomeRecompute, type RecomputeReport } from './recompute.ts';
import { type HistoryFilter, ScanProgress, scanHistory } from './scan.ts';
import { PROBE_TIMEOUT_MS, ServedVenues } from './served-venues.ts';
import { CSV_HEADER, csvLine, parquetStream } from './writers.ts';

export const USAGE = `${invocation('history')} <command> [options]

  export --out PATH [--format ndjson|csv|parquet] [--resume] [--page N]
         [--exchange X] [--coin C] [--timeframe T] [--call BUY|SELL|HOLD] [--from T] [--to T]
         (--url URL --key KEY | --store)      the labelled history to a file (parquet: a directory
                                              of part files); --resume continues an interrupted one
                                              from its <out>.checkpoint.json (a finished export
                                              removes it)
  verify (PATH [--call BUY|SELL|HOLD] | --url URL --key KEY | --store) [--format F] [--data DIR]
         [--anchors --rpc URL (--address ADDR [--from-block N] | --tx HASH ...) [--allow-uncovered]]
                                              every verdict and outcome chain end to end; reports the
                                              first broken link. --data DIR recomputes every outcome
                                              from the candles of a market-data folder (the shared
                                              layout, e.g. sample-data/market); --anchors checks the
                                              file against the roots anchored on chain. Exit 0 ok,
                                              1 failed, 3 partly verified: an anchor lies beyond the
                                              file, its last rows are unverified (--allow-uncovered:
                                              exit 0, same note). --call C: PATH is an export
                                              made with that call= filter; its links across the
                                              other calls' rows are not checked (exit 3 when
                                              the file skips any; 0 when it skips none)
  score PATH [--window 7d|30d|90d|all] [--as-of TIME] [--as-of-position N] [--format F]
                                              the track record from an export file alone (no
                                              --as-of: as of its latest due outcome, as the service)
  (verify and score read the format from the file's content unless --format names it)

--store reads the event store the service is configured with (EVENT_STORE, DATA_DIR, POSTGRES_URL, ...).
Exit 2: a usage error (a filter refused here or by the service; from --store, a --coin the log
holds no verdict of, or an --exchange or --timeframe it holds none of and the feed does not serve),
a PATH that holds no export (none there, a file that is no NDJSON, CSV or Parquet export; score: a
folder of no Parquet part),
a DATA_DIR or POSTGRES_SCHEMA that holds no event log, or a setting the service would refuse
(nothing was read); 1: the command failed (verify: a broken link; a file, --url answer or --store
read of no row, or of commitments only (none revealed: nothing rehashed) without --anchors; a --data
folder that holds the candles of none of its outcomes; a file with fewer rows than its NDJSON trailer says; a store that does not answer;
a file cut short).`;

export class UsageError extends Error {}

/**
 * A PATH that holds no export: none there, a folder of no Parquet part, or a file that is no
 * export in any format (noExportIn). A usage error (exit 2) told in its one line: the path is
 * what is wrong, and the usage would not say which one to give.
 */
export class NoExportError extends UsageError {
  override readonly name = 'NoExportError';
}

/**
 * An export that stopped part way (the server down, a refused key, a dropped connection): what
 * failed, and how to go on. Its checkpoint is kept, so `--resume` continues where it stopped.
 */
export class ExportInterruptedError extends Error {
  override readonly name = 'ExportInterruptedError';
}

/**
 * The cursor an export would resume from names an event the log read does not hold at its
 * position: the export was taken from another log (a DATA_DIR restored from a backup or replaced,
 * another service). Resuming would join the rows of two logs, which `verify` then reports as a
 * broken link; no retry can go on from it, so the export is started again instead.
 */
export class ForeignCursorError extends Error {
  override readonly name = 'ForeignCursorError';
}

const FOREIGN = 'a cursor from another log';

/** What a failed request says, without the bare `TypeError: fetch failed` of undici. */
/**
 * A market-data folder's read failing on the data, not on the code: a candle file named bad
 * (MarketFileError: a corrupt or truncated gzip) or a system call refused (EACCES, EISDIR, EIO:
 * errors with a `syscall`). Node's own ERR_* errors also carry a string `code`; they are bugs and
 * keep their stack.
 */
export function unreadableMarketData(err: unknown): boolean {
  return err instanceof MarketFileError || typeof (err as { syscall?: unknown } | null)?.syscall === 'string';
}

function describeFailure(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (err instanceof TypeError && cause) {
    const reason =
      cause.code === 'ECONNREFUSED' ? 'connection refused: is the service running?' : cause.message;
    return cause.code && !reason?.includes(cause.code) ? `${reason} (${cause.code})` : String(reason);
  }
  return (err as Error).message ?? String(err);
}

export interface CliDeps {
  /** The configured store, opened on demand (for --store). */
  openStore: () => Promise<EventStore>;
  /**
   * The deployment's market feed (the replay of openReplay when a replay ran on the log, else the
   * configured one), opened on demand (for --store) and only for an --exchange or --timeframe the
   * log holds no verdict of, which it judges as the service judges it. Absent or null: none asked.
   */
  openFeed?: () => Promise<MarketFeed | null>;
  /**
   * How long that check waits for the feed's venues, every probe of it together: the service's
   * FEED_PROBE_TIMEOUT_MS. Absent: PROBE_TIMEOUT_MS, that setting's default.
   */
  feedProbeTimeoutMs?: () => Promise<number>;
  /**
   * The replay whose clock a read from the store reveals on (deploymentReplay), opened on demand
   * (for --store). Absent or null: wall time, a live deployment's.
   */
  openReplay?: () => Promise<MarketFeed | null>;
  /** Progress bars go here (stderr); null: no bar. */
  progress: NodeJS.WritableStream | null;
  fetch?: typeof fetch;
  /**
   * Runs `finish` once the command's output is written (cli.ts: once stdout took it); absent, at
   * once. A finished export's checkpoint is removed so: a run killed before its summary is out
   * keeps the checkpoint (done), and `--resume` prints the summary.
   */
  afterOutput?: (finish: () => void) => void;
}

interface Page {
  rows: HistoryRow[];
  cursor: string;
  /** Log position reached, and the head, for the progress bar (store source only). */
  position?: number;
  head?: number;
}

type Source = (after: string | null, limit: number) => Promise<Page>;

const FILTERS = ['exchange', 'coin', 'timeframe', 'call', 'from', 'to'] as const;

/** The options each command takes (USAGE); parseArgs checks their types. */
const COMMAND_OPTIONS = {
  export: ['url', 'key', 'store', 'out', 'format', 'resume', 'page', ...FILTERS],
  verify: [
    'url',
    'key',
    'store',
    'format',
    'data',
    'anchors',
    'rpc',
    'address',
    'from-block',
    'tx',
    'allow-uncovered',
    'call',
  ],
  score: ['window', 'as-of', 'as-of-position', 'format'],
} as const;

/**
 * What the service refused that is an option's fault, in its words, else null: one of the
 * export's filters (400/404/422 naming it: `--coin: …`), or the key (401: `--key: …`).
 */
function optionRefusal(status: number, body: string): string | null {
  if (status !== 400 && status !== 401 && status !== 404 && status !== 422) return null;
  type Refusal = { code?: unknown; message?: unknown; field?: unknown };
  let refusal: Refusal = {};
  try {
    refusal = (JSON.parse(body) as Refusal | null) ?? {};
  } catch {}
  const { code, message, field } = refusal;
  if (status === 401) return `--key: ${typeof message === 'string' ? message : body} (HTTP 401)`;
  if (typeof message !== 'string' || !(FILTERS as readonly unknown[]).includes(field)) return null;
  return filterRefusal(String(field), message, String(code), status);
}

/**
 * A refused filter as the CLI tells it: the option, the error catalog's words and code, and the
 * HTTP status when the service answered it (`--exchange: exchange OKX is not served by the
 * replay feed: … (unsupported_exchange, HTTP 422)`); from --store, the same line without it.
 */
function filterRefusal(field: string, message: string, code: string, status?: number): string {
  return `--${field}: ${message} (${code}${status === undefined ? '' : `, HTTP ${status}`})`;
}

/** The export address of the service at `base` (a trailing slash or none). */
function verdictsUrl(base: string): string {
  return `${base.replace(/\/$/, '')}/api/verdicts`;
}

function urlSource(
  base: string,
  key: string,
  filters: Record<string, string>,
  doFetch: typeof fetch,
): Source {
  return async (after, limit) => {
    // The trailer line: where the next page starts (past rows the filters skipped), and proof
    // that the page arrived whole.
    const params = new URLSearchParams({
      ...filters,
      limit: String(limit),
      format: 'ndjson',
      trailer: 'true',
    });
    if (after) params.set('after', after);
    const url = verdictsUrl(base);
    let res: Response;
    try {
      res = await doFetch(`${url}?${params}`, {
        headers: { authorization: `Bearer ${key}`, accept: 'application/x-ndjson' },
      });
    } catch (err) {
      throw new Error(`could not reach ${url}: ${describeFailure(err)}`, { cause: err });
    }
    if (!res.ok) {
      const body = await res.text();
      // The service refuses a cursor of another log as this CLI's --store does (storeSource).
      if (res.status === 400 && body.includes('"FOREIGN_CURSOR"'))
        throw new ForeignCursorError(`${url} does not hold the event the cursor names (${FOREIGN})`);
      // A filter the service refuses (a coin no venue lists, a venue or timeframe it does not
      // serve) or a key it refuses (unknown, revoked, not a live key) is the option's fault, as a
      // filter refused here is: its words, exit 2; running the same command again cannot help.
      const refused = optionRefusal(res.status, body);
      if (refused) throw new UsageError(refused);
      // No such route (--url http://host/api/verdicts, or a path the service is not under): the
      // address is the option's fault, which running the same command again cannot mend.
      if (res.status === 404)
        throw new UsageError(
          `--url: GET ${url} answered 404 (${body.slice(0, 200)}); --url is the service's base address, such as http://localhost:8080 (the CLI adds /api/verdicts)`,
        );
      throw new Error(`GET ${url} answered ${res.status}: ${body}`);
    }
    const lines = (await res.text()).split('\n').filter((l) => l.trim() !== '');
    const trailer = HistoryTrailer.safeParse(JSON.parse(lines.at(-1) ?? 'null'));
    // No trailer: the response was cut short; the caller retries the page from the same cursor.
    if (!trailer.success)
      throw new Error('the export response ended without its cursor line (connection dropped?)');
    const rows = lines.slice(0, -1).map((l) => JSON.parse(l) as HistoryRow);
    return { rows, cursor: trailer.data.cursor };
  };
}

/**
 * The replay whose clock a read from the store reveals on (revealClock over it, as GET
 * /api/verdicts reveals on the service's feed), or null for wall time. Decided as the service's
 * clock is, from the settings and the log, never by asking the venues (FEED=auto's probe may answer
 * otherwise here than it did for the service): FEED=live serves on wall time; any other FEED on the
 * replay clock REPLAY_ANCHOR sets, else on the one the log records (`ReplayClockAnchored`, which
 * every replaying process of the deployment adopts; read, never written), else on wall time (no
 * process replayed on this log). The replay is opened over the configured data as the service opens
 * it (openReplayFeed); its opening is not logged; close it when done.
 */
export async function deploymentReplay(config: Config, store: EventStore): Promise<MarketFeed | null> {
  if (config.FEED === 'live') return null;
  const { replay } = feedOptionsFromConfig(config);
  if (config.REPLAY_ANCHOR !== undefined) return openReplayFeed(replay);
  const recorded = await recordedAnchor(store);
  if (recorded === undefined) return null;
  return openReplayFeed({ ...replay, anchorStore: async () => recorded });
}

function storeSource(store: EventStore, filter: HistoryFilter, now: () => number): Source {
  return async (after, limit) => {
    const cursor = after ? decodeCursor(after) : null;
    if (after && !cursor) throw new UsageError('the saved cursor is not a history cursor');
    const at =
      cursor && cursor.position > 0 ? await store.readAll({ after: cursor.position - 1, maxCount: 1 }) : [];
    // As GET /api/verdicts does (FOREIGN_CURSOR): the event at the cursor's position must be the
    // one it was taken at, else the rows after it are another log's.
    if (
      cursor &&
      cursor.position > 0 &&
      (at[0]?.position !== cursor.position || !tagMatches(cursor, at[0].id))
    )
      throw new ForeignCursorError(
        `the log read does not hold the event at position ${cursor.position} the cursor names (${FOREIGN})`,
      );
    const progress = new ScanProgress(cursor?.position ?? 0, at[0]?.id ?? null);
    const rows: HistoryRow[] = [];
    for await (const batch of scanHistory(
      store,
      { filter, after: progress.position, limit, now },
      progress,
    )) {
      rows.push(...batch);
    }
    return { rows, cursor: progress.cursor, position: progress.position, head: await store.headPosition() };
  };
}

/** How many of the coins the log holds a refused --coin names before "…". */
const HELD_COINS_NAMED = 20;

/**
 * The coins the log holds verdicts of (on `exchange` when given), from its verdict streams'
 * names (`verdicts-<exchange>-<coin>-<timeframe>`), in the order first recorded: at most
 * `most` + 1, so a refusal can say there are more. It reads the log until it has found that many
 * (the whole log when it holds fewer coins): only a refused --coin pays for it.
 */
async function heldCoins(store: EventStore, exchange: Exchange | undefined, most: number): Promise<string[]> {
  const coins = new Set<string>();
  for await (const market of verdictMarkets(store)) {
    if (exchange === undefined || market.exchange === exchange) coins.add(market.coin);
    if (coins.size > most) break;
  }
  return [...coins];
}

/**
 * The market of every verdict the log records, in log order, from its stream's name
 * (`verdicts-<exchange>-<coin>-<timeframe>`): read a page at a time, as far as the caller goes.
 */
async function* verdictMarkets(store: EventStore): AsyncGenerator<MarketKey> {
  for (let after = 0; ; ) {
    const page = await store.readAll({ after, maxCount: 1_000 });
    if (page.length === 0) return;
    for (const event of page) {
      const market = event.type === 'VerdictRecorded' ? parseVerdictStream(event.stream) : undefined;
      if (market) yield market;
    }
    after = page[page.length - 1]!.position;
  }
}

/**
 * An export read from the log (`--store`) has no feed to ask whether a coin exists, as
 * GET /api/verdicts does (unknown_coin): a mistyped coin would export no row, as a coin with no
 * verdict in the range asked does. The log tells them apart: a coin with no verdict stream on the
 * venue asked (any venue when none is), on any timeframe, is refused naming the coins it holds;
 * one held is exported, however few of its rows the other filters keep. A venue or timeframe is
 * judged apart (checkServedVenue); a name the query schema does not list is refused there.
 */
async function checkHeldCoin(store: EventStore, coin: string, exchange: Exchange | undefined): Promise<void> {
  const venues = exchange === undefined ? EXCHANGES : [exchange];
  // One lookup per stream the coin could have (venues × timeframes), rather than a read of the log.
  const revisions = await Promise.all(
    venues.flatMap((venue) =>
      TIMEFRAMES.map((timeframe) =>
        store.streamRevision(verdictStream({ exchange: venue, coin, timeframe })),
      ),
    ),
  );
  if (revisions.some((revision) => revision !== null)) return;
  const held = await heldCoins(store, exchange, HELD_COINS_NAMED);
  const on = exchange === undefined ? '' : ` on ${exchange}`;
  const named =
    held.length === 0
      ? `it holds no verdict${on} at all`
      : `it holds verdicts${on} of ${held.slice(0, HELD_COINS_NAMED).join(', ')}${held.length > HELD_COINS_NAMED ? ', …' : ''}`;
  throw new UsageError(`--coin: the log holds no verdict of ${coin}${on}; ${named}`);
}

/**
 * Whether the log holds a verdict on the venue and timeframe asked (either alone when only it is),
 * from the verdict streams' names: read until the first one, the whole log only when it holds none.
 */
async function logHolds(
  store: EventStore,
  ask: { exchange?: Exchange; timeframe?: Timeframe },
): Promise<boolean> {
  for await (const market of verdictMarkets(store)) {
    if (
      (ask.exchange === undefined || market.exchange === ask.exchange) &&
      (ask.timeframe === undefined || market.timeframe === ask.timeframe)
    )
      return true;
  }
  return false;
}

/**
 * An export read from the log (`--store`) refuses a venue or timeframe filter as GET /api/verdicts
 * does (ServedVenues): one the log holds no verdict of and the deployment's feed (openFeed) does
 * not serve is refused with the error catalog's code and the feed's words (unsupported_exchange /
 * unsupported_timeframe, 422 over HTTP), rather than exported as no row. What the log holds stays
 * exportable whatever the feed serves (a venue no longer served keeps its record). The feed is
 * opened only for a filter the log holds none of.
 */
async function checkServedVenue(
  store: EventStore,
  filter: HistoryFilter,
  { openFeed, feedProbeTimeoutMs }: Pick<CliDeps, 'openFeed' | 'feedProbeTimeoutMs'>,
): Promise<void> {
  const venues = new ServedVenues(
    async () => (openFeed ? await openFeed() : null),
    { has: (ask) => logHolds(store, ask) },
    Date.now,
    (await feedProbeTimeoutMs?.()) ?? PROBE_TIMEOUT_MS,
  );
  try {
    await venues.check({ exchange: filter.exchange, timeframe: filter.timeframe });
  } catch (err) {
    const answer = unservedAnswer(err);
    if (answer === null) throw err;
    throw new UsageError(filterRefusal(answer.field ?? 'exchange', answer.message, answer.code));
  }
}

interface Checkpoint {
  format: HistoryFormat;
  /**
   * The filters the export was started with, as read (coin and exchange upper-cased, times in
   * Unix ms): its cursor resumes only under the same ones. Absent in a checkpoint written before
   * it was kept.
   */
  filter?: HistoryFilter;
  cursor: string | null;
  rows: number;
  /** Bytes of the NDJSON/CSV file that hold complete pages; parts written for Parquet. */
  bytes: number;
  parts: number;
  done: boolean;
}

function saveCheckpoint(path: string, checkpoint: Checkpoint): void {
  writeFileSync(`${path}.tmp`, JSON.stringify(checkpoint));
  renameSync(`${path}.tmp`, path);
}

async function writePart(path: string, rows: HistoryRow[]): Promise<void> {
  await pipeline(parquetStream([rows]), createWriteStream(path));
}

async function appendText(path: string, text: string): Promise<void> {
  const out = createWriteStream(path, { flags: 'a' });
  if (!out.write(text)) await once(out, 'drain');
  out.end();
  await once(out, 'finish');
}

function readCheckpoint(path: string): Checkpoint | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Checkpoint;
  } catch {
    return null;
  }
}

/**
 * Removes what an export that wrote no row left (an empty directory, or a file holding no more
 * than the CSV header) and its checkpoint; anything more is the user's to judge. True when gone.
 */
function removeEmptyExport(out: string, checkpointPath: string, bytes: number): boolean {
  if (existsSync(out)) {
    const stat = statSync(out);
    const empty = stat.isDirectory() ? readdirSync(out).length === 0 : stat.size <= bytes;
    if (!empty) return false;
    rmSync(out, { recursive: stat.isDirectory() });
  }
  rmSync(checkpointPath, { force: true });
  return true;
}

/** A filter as the options that ask for it (`--coin BTC --from 2025-06-01T00:00:00.000Z`), or `no filter`. */
function filterOptions(filter: HistoryFilter): string {
  const options = FILTERS.flatMap((name) => {
    const value = filter[name];
    if (value === undefined) return [];
    return [`--${name} ${typeof value === 'number' ? new Date(value).toISOString() : value}`];
  });
  return options.length > 0 ? options.join(' ') : 'no filter';
}

/** Whether two filters ask for the same rows (the same options, whatever their order). */
function sameFilter(a: HistoryFilter, b: HistoryFilter): boolean {
  return FILTERS.every((name) => a[name] === b[name]);
}

/** How to start `out` over: the paths to remove. */
function startOver(out: string, checkpointPath: string): string {
  return existsSync(checkpointPath)
    ? `remove ${out} and ${checkpointPath} to start over`
    : `remove ${out} to start over`;
}

/**
 * The progress line. A store source knows the log's head, so it shows log positions out of the
 * head; over HTTP the total is unknown until the last page, so it shows rows and their rate
 * rather than a bar whose total means nothing.
 */
function progressBar(stream: NodeJS.WritableStream, byPosition: boolean): SingleBar {
  return new SingleBar({
    stream,
    format: byPosition
      ? 'export |{bar}| {percentage}% | log position {value}/{total} | {rows} rows | {rate} rows/s'
      : 'export | {rows} rows | {rate} rows/s | {duration_formatted}',
    noTTYOutput: true,
    notTTYSchedule: 2_000,
  });
}

/** The last row an interrupted export holds (in its checkpoint's bytes or parts); null for none. */
async function lastExportedRow(
  out: string,
  format: string,
  checkpoint: Checkpoint,
): Promise<Pick<HistoryRow, 'position' | 'verdict_id' | 'hash'> | null> {
  if (checkpoint.rows === 0) return null;
  if (format === 'parquet') {
    let last: HistoryRow | null = null;
    const part = join(out, `part-${String(checkpoint.parts).padStart(6, '0')}.parquet`);
    for await (const row of readExport(part, 'parquet')) last = row;
    return last;
  }
  // The export never puts a line break inside a row: its last line is the tail's.
  const length = Math.min(checkpoint.bytes, 1 << 20);
  const tail = Buffer.alloc(length);
  const fd = openSync(out, 'r');
  try {
    readSync(fd, tail, 0, length, checkpoint.bytes - length);
  } finally {
    closeSync(fd);
  }
  const line = tail.toString('utf8').trimEnd().split('\n').at(-1) ?? '';
  if (format === 'ndjson') return JSON.parse(line) as HistoryRow;
  const columns = CSV_HEADER.trimEnd().split(',');
  const cells = parseCsvLine(line);
  const cell = (name: string) => cells[columns.indexOf(name)] ?? '';
  return { position: Number(cell('position')), verdict_id: cell('verdict_id'), hash: cell('hash') };
}

/**
 * Resuming from a store: the last row the export holds must be the verdict the store holds at its
 * position, hash included. After a restore from an older backup the engine records the same
 * verdicts again (same ids, so a cursor's id tag matches) with other hashes: the rows after the
 * cursor would not link to those already exported.
 */
async function checkLastRow(
  store: EventStore,
  out: string,
  format: string,
  checkpoint: Checkpoint,
): Promise<void> {
  const last = await lastExportedRow(out, format, checkpoint);
  if (last === null) return;
  const [event] = await store.readAll({ after: last.position - 1, maxCount: 1 });
  const hash = (event?.data as { hash?: unknown } | undefined)?.hash;
  if (event?.position === last.position && event.id === last.verdict_id && hash === last.hash) return;
  throw new ForeignCursorError(
    `the log read does not hold the last exported verdict (${last.verdict_id} at position ${last.position}) ` +
      `as exported: ${event?.id === last.verdict_id ? 'its hash differs, recorded again' : 'another event is there'} (${FOREIGN})`,
  );
}

async function exportCommand(
  values: Record<string, unknown>,
  deps: CliDeps,
  source: Source,
  filter: HistoryFilter,
  byPosition: boolean,
  store?: EventStore,
): Promise<string> {
  const out = values.out as string | undefined;
  if (!out) throw new UsageError('export needs --out PATH');
  const format = (values.format as string | undefined) ?? formatOf(out);
  if (!(HISTORY_FORMATS as readonly string[]).includes(format))
    throw new UsageError(`unknown format ${format}`);
  const pageSize = Number(values.page ?? 10_000);
  if (!(pageSize >= 1 && pageSize <= 1_000_000)) throw new UsageError('--page must be from 1 to 1000000');
  const checkpointPath = `${out}.checkpoint.json`;
  let checkpoint: Checkpoint;
  if (values.resume) {
    if (!existsSync(checkpointPath))
      throw new UsageError(
        `nothing to resume: ${checkpointPath} does not exist (an export keeps it only while it is unfinished)`,
      );
    const saved = readCheckpoint(checkpointPath);
    if (saved === null)
      throw new UsageError(`${checkpointPath} is unreadable: ${startOver(out, checkpointPath)}`);
    checkpoint = saved;
    if (checkpoint.format !== format) throw new UsageError(`${out} was started as ${checkpoint.format}`);
    // The cursor resumes the rows of the filters it was served under: other filters would append
    // rows of another selection (or leave out some of this one), and the file would still verify.
    if (checkpoint.filter !== undefined && !sameFilter(checkpoint.filter, filter)) {
      throw new UsageError(
        `${out} was exported with ${filterOptions(checkpoint.filter)}, not ${filterOptions(filter)}: --resume continues it with the same filters (run the command it was started with), or ${startOver(out, checkpointPath)}`,
      );
    }
    // Drop whatever a dropped page left after the last complete one.
    if (format !== 'parquet' && existsSync(out)) truncateSync(out, checkpoint.bytes);
  } else {
    const saved = existsSync(checkpointPath) ? readCheckpoint(checkpointPath) : null;
    // An export that failed before its first row holds nothing worth resuming: a plain re-run
    // starts it again rather than ask the user to clean up after us.
    // Nor does a finished export's checkpoint (done: one killed between its last page and the
    // checkpoint's removal below) once the export itself was removed: it records rows that are
    // gone, and the run that re-creates them writes its own.
    const finishedAndRemoved = saved?.done === true && !existsSync(out);
    if (finishedAndRemoved) rmSync(checkpointPath, { force: true });
    const restarted =
      finishedAndRemoved ||
      (saved !== null &&
        !saved.done &&
        saved.rows === 0 &&
        saved.format === format &&
        removeEmptyExport(out, checkpointPath, saved.bytes));
    // Otherwise nothing was lost, and the export starts again below.
    if (!restarted && saved !== null && !saved.done) {
      throw new UsageError(
        `${out} holds an interrupted export (${saved.rows} rows so far): run the same command with --resume to continue it, or ${startOver(out, checkpointPath)}`,
      );
    }
    // Finished, but stopped before its summary was out: --resume prints it.
    if (!restarted && saved?.done === true) {
      throw new UsageError(
        `${out} holds a finished export (${saved.rows} rows) whose summary was not printed: run the same command with --resume to finish it, or ${startOver(out, checkpointPath)}`,
      );
    }
    if (!restarted && (existsSync(out) || existsSync(checkpointPath))) {
      throw new UsageError(
        `${existsSync(out) ? out : checkpointPath} exists: choose another --out, or ${startOver(out, checkpointPath)}`,
      );
    }
    checkpoint = {
      format: format as HistoryFormat,
      filter,
      cursor: null,
      rows: 0,
      bytes: 0,
      parts: 0,
      done: false,
    };
    // The folders asked for are made, as for Parquet's folder of parts: the README's
    // exports/… does not exist in a fresh checkout.
    makeDirectory(format === 'parquet' ? out : dirname(out));
    if (format !== 'parquet') writeFileSync(out, format === 'csv' ? CSV_HEADER : '');
    checkpoint.bytes = format === 'csv' ? Buffer.byteLength(CSV_HEADER) : 0;
    saveCheckpoint(checkpointPath, checkpoint);
  }
  const bar = deps.progress ? progressBar(deps.progress, byPosition) : null;
  const started = performance.now();
  const startRows = checkpoint.rows;
  const rate = () => {
    const seconds = (performance.now() - started) / 1000;
    return seconds > 0 ? Math.round((checkpoint.rows - startRows) / seconds).toLocaleString('en') : '0';
  };
  // Started with the first page: only then does a store source know the head it counts towards.
  let barStarted = false;
  try {
    if (values.resume && store) await checkLastRow(store, out, format, checkpoint);
    while (!checkpoint.done) {
      const page = await source(checkpoint.cursor, pageSize);
      const last = page.rows.length < pageSize;
      // A Parquet export of no row is one part of no row, every column typed, as the service's
      // Parquet answer of no row is: read_parquet('<out>/*.parquet') reads an empty table rather
      // than failing on a folder with no file.
      if (format === 'parquet' && (page.rows.length > 0 || (last && checkpoint.parts === 0))) {
        checkpoint.parts++;
        await writePart(join(out, `part-${String(checkpoint.parts).padStart(6, '0')}.parquet`), page.rows);
      } else if (page.rows.length > 0) {
        const text =
          format === 'csv'
            ? page.rows.map(csvLine).join('')
            : page.rows.map((r) => `${JSON.stringify(r)}\n`).join('');
        await appendText(out, text);
        checkpoint.bytes += Buffer.byteLength(text);
      }
      checkpoint.rows += page.rows.length;
      checkpoint.cursor = page.cursor;
      checkpoint.done = last;
      saveCheckpoint(checkpointPath, checkpoint);
      if (bar) {
        const payload = { rows: checkpoint.rows, rate: rate() };
        const value = byPosition ? (page.position ?? 0) : 0;
        if (!barStarted) bar.start(page.head ?? 1, value, payload);
        else {
          if (page.head !== undefined) bar.setTotal(page.head);
          bar.update(value, payload);
        }
        barStarted = true;
      }
    }
  } catch (err) {
    if (err instanceof UsageError) {
      // Refused before its first row (a filter the service does not serve): nothing left behind.
      if (checkpoint.rows === 0 && !values.resume) removeEmptyExport(out, checkpointPath, checkpoint.bytes);
      throw err;
    }
    if (err instanceof ForeignCursorError) {
      // Resuming cannot help: it fails the same way every time. What was written is kept.
      throw new ForeignCursorError(
        `export stopped after ${checkpoint.rows} rows: ${err.message}\n` +
          `${out} was exported from another log than the one read now (a restored or replaced DATA_DIR, ` +
          `another service?): resuming would join rows of two logs. Start a new export: choose another --out, ` +
          `or ${startOver(out, checkpointPath)}, and run the command without --resume`,
        { cause: err },
      );
    }
    // Nothing exported yet: leave nothing behind either, so the next try starts clean.
    if (checkpoint.rows === 0 && !values.resume) removeEmptyExport(out, checkpointPath, checkpoint.bytes);
    const next =
      checkpoint.rows === 0
        ? 'run the same command again once that is fixed'
        : `run the same command with --resume to continue from row ${checkpoint.rows + 1}, or ${startOver(out, checkpointPath)}`;
    throw new ExportInterruptedError(
      `export stopped after ${checkpoint.rows} rows: ${(err as Error).message}\n${next}`,
      { cause: err },
    );
  } finally {
    if (barStarted) bar?.stop();
  }
  // Finished: nothing is left to resume, so its checkpoint goes once the summary printed holds
  // what it held (rows, cursor).
  const removeCheckpoint = () => rmSync(checkpointPath, { force: true });
  if (deps.afterOutput) deps.afterOutput(removeCheckpoint);
  else removeCheckpoint();
  return JSON.stringify({ out, format, rows: checkpoint.rows, cursor: checkpoint.cursor });
}

async function* sourceRows(source: Source): AsyncGenerator<HistoryRow> {
  let cursor: string | null = null;
  for (;;) {
    const page = await source(cursor, 10_000);
    yield* page.rows;
    if (page.rows.length < 10_000) return;
    cursor = page.cursor;
  }
}

/** The rows of an export file to check: in the `--format` given, else the one its content shows. */
function exportRows(path: string, format: unknown): AsyncGenerator<HistoryRow>;
function exportRows(
  path: string,
  format: unknown,
  pastMalformed: true,
  onTrailer: (count: TrailerCount) => void,
): AsyncGenerator<HistoryRow | MalformedRowError>;
function exportRows(
  path: string,
  format: unknown,
  pastMalformed = false,
  onTrailer?: (count: TrailerCount) => void,
): AsyncGenerator<HistoryRow | MalformedRowError> {
  if (!existsSync(path)) throw new NoExportError(`no export at ${path}`);
  if (format !== undefined && !(HISTORY_FORMATS as readonly string[]).includes(format as string))
    throw new UsageError(`unknown format ${String(format)} (${HISTORY_FORMATS.join(', ')})`);
  const noExport = noExportIn(path);
  if (noExport !== null) throw new NoExportError(`no export at ${path}: ${noExport}`);
  if (!pastMalformed)
    return format === undefined ? readExport(path) : readExport(path, format as HistoryFormat);
  return format === undefined
    ? readExportPastMalformed(path, undefined, onTrailer)
    : readExportPastMalformed(path, format as HistoryFormat, onTrailer);
}

/** The bytes read to tell an export from another file: an export's CSV header or first row fits. */
const HEAD_BYTES = 64 * 1024;

/** The names an export's first line opens with: a row's columns, or a served NDJSON trailer's. */
const EXPORT_NAMES: readonly string[] = [...HISTORY_COLUMNS, ...Object.keys(HistoryTrailer.shape)];

/**
 * Why the file at `path` is no export in any format (null: it is one, whole or broken, or it
 * cannot be read here and its reader says why). An export opens with `PAR1` (Parquet), a JSON
 * object of a row's or a trailer's fields (NDJSON; a first line cut short opens with one of their
 * names), or a CSV header naming position and verdict_id (or a start of the export's header, cut
 * short). An empty file is an export of no row. A file that opens otherwise (a text file, a JSON
 * document, a program) holds no export, whatever --format names: a usage error (exit 2), not a
 * broken export (exit 1), which is one a checked row or line fails in. A folder is Parquet parts,
 * judged by its reader.
 */
function noExportIn(path: string): string | null {
  let head: string;
  try {
    if (statSync(path).isDirectory()) return null;
    const buf = Buffer.alloc(HEAD_BYTES);
    const fd = openSync(path, 'r');
    try {
      head = buf.subarray(0, readSync(fd, buf, 0, buf.length, 0)).toString('utf8');
    } finally {
      closeSync(fd);
    }
  } catch {
    return null;
  }
  // A byte order mark (a file saved as "UTF-8 with BOM") is no character of the file.
  const text = head.replace(/^\uFEFF/, '');
  if (text.trim() === '' || text.startsWith('PAR1')) return null;
  const opened = text.trimStart();
  const end = opened.indexOf('\n');
  const first = (end < 0 ? opened : opened.slice(0, end)).replace(/\r$/, '');
  if (first.startsWith('{')) {
    try {
      const record: unknown = JSON.parse(first);
      if (
        record !== null &&
        typeof record === 'object' &&
        !Array.isArray(record) &&
        Object.keys(record).some((name) => EXPORT_NAMES.includes(name))
      )
        return null;
    } catch {
      // A first line cut short (or longer than the bytes read): a row's opens with one of its names.
      const name = /^\{\s*"([^"]*)/.exec(first)?.[1];
      if (name !== undefined && EXPORT_NAMES.some((known) => known.startsWith(name))) return null;
    }
  } else {
    const fields = (() => {
      try {
        return parseCsvLine(first);
      } catch {
        return [];
      }
    })();
    if (fields.includes('position') && fields.includes('verdict_id')) return null;
    // The export's own header cut short, with nothing after it.
    if (end < 0 && first !== '' && CSV_HEADER.startsWith(first)) return null;
  }
  // What it opens with, shown as text (a binary file's bytes escaped), so the file can be told.
  const shown = JSON.stringify(first.slice(0, 40));
  return `the file is no export in any format (it opens with ${shown}, where an NDJSON export opens with a row's JSON object, a CSV export with a header naming position and verdict_id, a Parquet file with PAR1)`;
}

/**
 * Why verifying an export file is no evidence of the history (null: it is): the file holds
 * no row (a 0-byte file, an NDJSON trailer alone, a CSV header alone, a Parquet directory without
 * a row), or fewer rows than a trailer line of a served NDJSON answer says the answer held.
 */
function incompleteFile(
  path: string,
  report: ChainReport,
  trailers: TrailerCount[],
  anchored: boolean,
): string | null {
  const short = trailers.find((t) => t.held < t.says);
  if (short)
    return `${path}: line ${short.line}, the answer's trailer, says it held ${short.says} rows; the file holds ${short.held} before it (${short.says - short.held} missing): a file cut or edited is no evidence; fetch the answer again`;
  // A first line that is no row in the format read (a CSV file read as NDJSON) is its broken link.
  if (report.rows === 0 && report.firstBroken === null)
    return `${path} holds no rows: 0 rows checked, so nothing is verified (an export no row matched, or a file emptied or cut, is no evidence)`;
  return anchored ? null : commitmentsOnly(path, 'holds', report);
}

/**
 * A file or read of commitments only (no revealed row, so no hash recomputed from its content):
 * its links join hashes nothing in it can be checked against, so the walk verified nothing (null:
 * it rehashed a row, or stopped at a broken link). The anchors can still check the commitments
 * (`--anchors`): the callers ask this only without them.
 */
function commitmentsOnly(source: string, holds: string, report: ChainReport): string | null {
  if (report.rows === 0 || report.rehashed > 0 || report.firstBroken !== null) return null;
  return `${source} ${holds} ${report.rows} rows, none revealed: no hash could be recomputed from its content (rehashed: 0), so nothing is verified (a verdict is revealed six candles after its close: export again once some are, or check the commitments against the anchors with --anchors)`;
}

/** At most this many series are named in a no-coverage message; the report lists every one. */
const NAMED_SERIES = 10;

/**
 * A --data folder that covers none of the outcomes (checked 0, each counted notInData): no outcome
 * was recomputed, so --data verified nothing (null: it recomputed one, or there was none to). One
 * that covers some checks those; its report counts the others (notInData) and lists what they need.
 */
function noneRecomputed(source: string, holds: string, report: RecomputeReport): string | null {
  if (report.checked > 0 || report.notInData === 0) return null;
  const named = report.uncovered
    .slice(0, NAMED_SERIES)
    .map((s) => `${s.exchange} ${s.coin} ${s.timeframe} from ${s.from} to ${s.to}`);
  const more = report.uncovered.length - named.length;
  if (more > 0) named.push(`${more} more (recomputed.uncovered)`);
  return `${source} ${holds} ${report.notInData} outcomes, none in ${report.dir}: no outcome could be recomputed from that folder (checked: 0, notInData: ${report.notInData}), so no outcome is verified (they need the candles of ${named.join('; ')}: give --data a market-data folder that holds them)`;
}

/**
 * A read from the service (--url) or the log (--store) that gave no row verified nothing, as a file
 * of no row does (null: it gave rows).
 */
function incompleteRead(source: string, report: ChainReport, anchored: boolean): string | null {
  if (report.rows > 0) return anchored ? null : commitmentsOnly(source, 'gave', report);
  if (report.firstBroken !== null) return null;
  return `${source} gave no rows: 0 rows checked, so nothing is verified (a log of no verdict is no evidence)`;
}

/** The anchors `verify --anchors` checks against, read from the chain at --rpc. */
async function chainAnchors(values: Record<string, unknown>): Promise<ChainAnchor[]> {
  const rpcUrl = values.rpc as string | undefined;
  if (!rpcUrl) throw new UsageError('--anchors needs --rpc URL (a JSON-RPC endpoint of the anchoring chain)');
  const txs = (values.tx as string[] | undefined) ?? [];
  const address = values.address as string | undefined;
  if (txs.length === 0 && !address)
    throw new UsageError(
      '--anchors needs --address ADDR (the anchoring wallet) or --tx HASH for each anchor',
    );
  if (address !== undefined && !/^0x[0-9a-fA-F]{40}$/.test(address))
    throw new UsageError(`--address ${address} is not a 0x-prefixed 20-byte address`);
  for (const tx of txs)
    if (!/^0x[0-9a-fA-F]{64}$/.test(tx)) throw new UsageError(`--tx ${tx} is not a transaction hash`);
  const from = values['from-block'] as string | undefined;
  if (from !== undefined && !/^\d+$/.test(from)) throw new UsageError('--from-block must be a block number');
  let found: ChainAnchor[];
  try {
    found = await readChainAnchors({
      rpcUrl,
      ...(address ? { address } : {}),
      ...(from ? { fromBlock: BigInt(from) } : {}),
      txs,
    });
  } catch (err) {
    // A chain that does not answer is expected, not a bug: one line (viem's own message runs to
    // the URL, the request body and its version on lines of their own), exit 1 without a stack.
    const { shortMessage, details } = err as { shortMessage?: unknown; details?: unknown };
    const why =
      typeof shortMessage === 'string'
        ? `${shortMessage.replace(/\.$/, '')}${typeof details === 'string' ? ` (${details})` : ''}`
        : describeFailure(err);
    throw new CommandFailedError(
      `could not read the anchors at ${rpcUrl}: ${why.replaceAll('\n', ' ')}; check --rpc (a JSON-RPC endpoint of the anchoring chain) and run the command again`,
      { cause: err },
    );
  }
  // The chain answered and holds none: an expected failure (a wrong wallet or chain, a --from-block
  // past them, none sent yet), one line saying what to check, exit 1 (not a usage error).
  if (found.length === 0)
    throw new CommandFailedError(
      `no anchor transaction from ${address} found at ${rpcUrl}${from ? ` from block ${from}` : ''}: check --address is the anchoring wallet (the address /readyz shows under processor:history-anchor), --rpc a node of the chain it anchors on (HISTORY_ANCHOR_RPC_URL, else X402_RPC_URL)${from ? ' and --from-block' : ''}; the first anchor is sent a minute after the service starts`,
    );
  return found;
}

/**
 * What an export made with call= (verify --call) leaves unchecked, in words: its links that skip
 * the verdicts it does not hold (null: none skips one).
 */
function skippedNote(report: ChainReport): string | null {
  const skipped = report.skippedLinks;
  if (skipped === null) return null;
  const { call, links, first } = skipped;
  return `${links} link${links === 1 ? ' skips' : 's skip'} verdicts the file does not hold (the first at ${first.stream} position ${first.position}): an export made with call=${call} leaves the other calls' revealed rows out, so those links, and the outcome links of their streams, are not checked (a row dropped from the file would look the same); every row's hash, stamps and outcome hash are, and every revealed row is a ${call} call. An export without call= checks every link.`;
}

/**
 * verify's exit code from its output: 0 ok, 3 partly verified (rows no checked anchor covers, or
 * the links of a call= export that skip the other calls' rows: verify --call), 1 failed.
 */
export function verifyExitCode(output: { ok: boolean; partlyVerified?: boolean }): number {
  if (output.ok) return 0;
  return output.partlyVerified ? 3 : 1;
}

/**
 * Every option of every command (parseArgs checks their types). Each takes one value but `--tx`,
 * a list (one per anchoring transaction): given twice, any other is refused, not its last kept.
 */
const OPTIONS = {
  url: { type: 'string' },
  key: { type: 'string' },
  store: { type: 'boolean' },
  out: { type: 'string' },
  format: { type: 'string' },
  resume: { type: 'boolean' },
  page: { type: 'string' },
  window: { type: 'string' },
  'as-of': { type: 'string' },
  'as-of-position': { type: 'string' },
  data: { type: 'string' },
  anchors: { type: 'boolean' },
  rpc: { type: 'string' },
  address: { type: 'string' },
  'from-block': { type: 'string' },
  tx: { type: 'string', multiple: true },
  'allow-uncovered': { type: 'boolean' },
  ...(Object.fromEntries(FILTERS.map((f) => [f, { type: 'string' }])) as Record<
    (typeof FILTERS)[number],
    { type: 'string' }
  >),
} as const satisfies Record<string, { type: 'string' | 'boolean'; multiple?: boolean }>;

export async function runHistoryCommand(argv: string[], deps: CliDeps): Promise<string> {
  const [command, ...rest] = argv;
  // Own keys only: `toString` is no command.
  if (command === undefined || !Object.hasOwn(COMMAND_OPTIONS, command))
    throw new UsageError(unknownCommandRefusal(command, Object.keys(COMMAND_OPTIONS)));
  const parsed = (() => {
    try {
      return parseArgs({ args: rest, allowPositionals: true, strict: true, tokens: true, options: OPTIONS });
    } catch (err) {
      throw new UsageError(parseArgsRefusal(command, err));
    }
  })();
  const { values, positionals, tokens } = parsed;
  // An option taking one value given twice (`export --coin BTC --coin ETH` exported ETH alone),
  // on every command, and one a command does not take (parseArgs knows every command's options
  // at once: `verify --coin BTC` would verify every coin while looking filtered): refused before
  // anything is read, not ignored. --key's values are API keys, never printed.
  const takes: readonly string[] = COMMAND_OPTIONS[command as keyof typeof COMMAND_OPTIONS];
  const refusal = optionsRefusal(command, OPTIONS, takes, tokens, ['key']);
  if (refusal !== null) throw new UsageError(refusal);
  const most = command === 'export' ? 0 : 1;
  if (positionals.length > most)
    throw new UsageError(`${command} takes ${most === 0 ? 'no path' : 'one path'}: ${positionals.join(' ')}`);
  // One place the history is read from: a second would be ignored without a word (`verify PATH
  // --url … --key …` checked the file alone, ok, as if checked against the service).
  if (command === 'export' || command === 'verify') {
    const given = [
      ...(command === 'verify' && positionals.length > 0 ? [positionals[0]!] : []),
      ...(values.url !== undefined ? ['--url'] : []),
      ...(values.store ? ['--store'] : []),
    ];
    if (given.length > 1)
      throw new UsageError(
        `${command} reads one source, got ${given.join(' and ')}: ${command === 'verify' ? 'PATH, ' : ''}--url URL --key KEY or --store`,
      );
    if (values.key !== undefined && values.url === undefined) throw new UsageError('--key goes with --url');
  }
  const filters: Record<string, string> = {};
  for (const f of FILTERS) if (typeof values[f] === 'string') filters[f] = values[f] as string;
  // Read by GET /api/verdicts' own schema, so --url and --store take the same values (exchange,
  // timeframe and call exactly as listed; coin in either case) and refuse the same ones.
  const read = HistoryQuerySchema.safeParse(filters);
  if (!read.success) {
    const first = read.error.issues[0]!;
    throw new UsageError(`--${String(first.path[0])}: ${first.message}`);
  }
  const filter = historyFilter(read.data);
  // A read from the log reveals on the deployment's clock (its replay's, else wall time).
  const storeRead = async (store: EventStore): Promise<Source> =>
    storeSource(store, filter, revealClock((await deps.openReplay?.()) ?? null));
  const source = async (): Promise<Source> => {
    if (values.url) {
      if (typeof values.key !== 'string') throw new UsageError('--url needs --key');
      // localhost:8080 reads as a URL of scheme "localhost": told as a failed fetch, "run the same
      // command again" would follow.
      if (!/^https?:\/\/[^/]/i.test(String(values.url)) || !URL.canParse(String(values.url)))
        throw new UsageError(
          `--url must be the service's http(s) address, such as http://localhost:8080; got ${JSON.stringify(values.url)}`,
        );
      return urlSource(values.url as string, values.key, filters, deps.fetch ?? fetch);
    }
    if (values.store) {
      return storeRead(await deps.openStore());
    }
    throw new UsageError('say where the history is: --url URL --key KEY, or --store');
  };
  switch (command) {
    case 'export': {
      if (values.url || !values.store) return exportCommand(values, deps, await source(), filter, false);
      const store = await deps.openStore();
      // Before anything is written: a refused filter leaves no file behind. In the route's order:
      // the venue and timeframe, then the coin.
      await checkServedVenue(store, filter, deps);
      if (filter.coin !== undefined) await checkHeldCoin(store, filter.coin, filter.exchange);
      return exportCommand(values, deps, await storeRead(store), filter, true, store);
    }
    case 'verify': {
      // Read past a malformed row: the chain walk stops at it, the anchors and --data check every row.
      const path = positionals[0];
      const trailers: TrailerCount[] = [];
      const rows = path
        ? exportRows(path, values.format, true, (count) => trailers.push(count))
        : sourceRows(await source());
      const data = values.data as string | undefined;
      if (data !== undefined && !existsSync(data)) throw new UsageError(`no market-data folder at ${data}`);
      // The call= filter an export file was made with: a read from the service or the log is whole.
      const filteredBy = read.data.call;
      if (filteredBy !== undefined && !path)
        throw new UsageError('--call goes with PATH: an export file made with that call= filter');
      // The anchors' options without --anchors would verify the chains alone while looking anchored.
      const anchorOnly = (['rpc', 'address', 'tx', 'from-block', 'allow-uncovered'] as const).filter(
        (name) => values[name] !== undefined && values[name] !== false,
      );
      if (anchorOnly.length > 0 && !values.anchors)
        throw new UsageError(`${anchorOnly.map((name) => `--${name}`).join(', ')} goes with --anchors`);
      const anchors = values.anchors ? new AnchorCheck(await chainAnchors(values)) : null;
      // A folder that holds no market data (no candles in the shared layout) is the option's
      // fault: one line, exit 2, not a stack trace. One whose candles cannot be read (a file this
      // user may not read, a disk error, a corrupt file) is no usage error: one line, exit 1, as
      // the command's other failures; anything else (a bug) keeps its stack.
      const recompute =
        data === undefined
          ? null
          : await OutcomeRecompute.open(data).catch((err: unknown) => {
              if (err instanceof NoMarketDataError)
                throw new UsageError(
                  `--data ${data}: ${err.message} (a market-data folder in the shared layout, such as sample-data/market)`,
                );
              if (unreadableMarketData(err))
                throw new CommandFailedError(
                  `--data ${data}: could not read its market data: ${(err as Error).message}; run the command again once every candle file of the folder is readable`,
                  { cause: err },
                );
              throw err;
            });
      try {
        const onRow = async (row: HistoryRow) => {
          anchors?.onRow(row);
          await recompute?.check(row);
        };
        const report = await verifyRows(rows, {
          ...(anchors || recompute ? { onRow } : {}),
          ...(filteredBy !== undefined ? { call: filteredBy } : {}),
        });
        const recomputed = recompute?.report;
        const anchored = anchors?.finish();
        // A file or read of no row, or a file short of its trailer's count, is not verified: there
        // is nothing to verify.
        const from = values.url ? verdictsUrl(String(values.url)) : 'the log (--store)';
        const incomplete =
          (path
            ? incompleteFile(path, report, trailers, anchors !== null)
            : incompleteRead(from, report, anchors !== null)) ??
          (recomputed ? noneRecomputed(path ?? from, path ? 'holds' : 'gave', recomputed) : null);
        const passed =
          report.ok && incomplete === null && (recomputed?.mismatched ?? 0) === 0 && (anchored?.ok ?? true);
        // An anchor beyond the file: its last rows are verified by none (a cut file looks the
        // same as an early export), so not ok unless the analyst accepts that (exit 3, not 1).
        const unverified = passed ? (anchored?.unverified ?? null) : null;
        // A call= export's links across the other calls' rows: not checked, so never ok, and no
        // broken link either (exit 3); --allow-uncovered is the anchors' and does not pass it.
        const skipped = passed ? skippedNote(report) : null;
        const ok = passed && skipped === null && (unverified === null || values['allow-uncovered'] === true);
        const notes = [skipped, unverified?.note ?? null].filter((note) => note !== null);
        return JSON.stringify(
          {
            ...report,
            ok,
            ...(incomplete ? { incomplete } : {}),
            ...(anchored || skipped !== null
              ? { partlyVerified: notes.length > 0, unverified: notes.length > 0 ? notes.join(' ') : null }
              : {}),
            ...(recomputed ? { recomputed } : {}),
            ...(anchored ? { anchors: anchored } : {}),
          },
          null,
          2,
        );
      } finally {
        await recompute?.close();
      }
    }
    case 'score': {
      const path = positionals[0];
      if (!path) throw new UsageError('score needs the export file');
      const window = (values.window as string | undefined) ?? 'all';
      if (!(TRACK_RECORD_WINDOWS as readonly string[]).includes(window)) {
        throw new UsageError(`--window must be one of ${TRACK_RECORD_WINDOWS.join(', ')}`);
      }
      const asOf = values['as-of'] ? parseTime('--as-of', values['as-of'] as string) : undefined;
      const at = values['as-of-position'] as string | undefined;
      if (at !== undefined && !/^\d+$/.test(at)) {
        throw new UsageError(
          "--as-of-position must be a log position (a whole number, the answer's asOfPosition)",
        );
      }
      // A folder of no Parquet part is no export (one no row matched holds a part of no row): a
      // mistyped path, or an export not copied yet, would score an empty track record, exit 0.
      if (
        existsSync(path) &&
        statSync(path).isDirectory() &&
        !readdirSync(path).some((f) => f.endsWith('.parquet'))
      )
        throw new NoExportError(
          `no export at ${path}: the folder holds no Parquet part (part-*.parquet; an export of no row holds one)`,
        );
      const rows = exportRows(path, values.format);
      return JSON.stringify(
        await scoreRows(rows, window as TrackRecordWindow, asOf, at === undefined ? undefined : Number(at)),
        null,
        2,
      );
    }
    default:
      throw new UsageError(unknownCommandRefusal(command, Object.keys(COMMAND_OPTIONS)));
  }
}
