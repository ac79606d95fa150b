import { once } from 'node:events';
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { SingleBar } from 'cli-progress';
import type { EventStore } from '../../adapters/event-store/port.ts';
import {
  HISTORY_FORMATS,
  type HistoryFormat,
  type HistoryRow,
  HistoryTrailer,
  TRACK_RECORD_WINDOWS,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import { scoreRows, verifyRows } from './audit.ts';
import { decodeCursor } from './cursor.ts';
import { formatOf, readExport } from './files.ts';
import { parseTime } from './query.ts';
import { ScanProgress, scanHistory } from './scan.ts';
import { CSV_HEADER, csvLine, parquetStream } from './writers.ts';

export const USAGE = `npm run history -- <command> [options]

  export --out PATH [--format ndjson|csv|parquet] [--resume] [--page N]
         [--exchange X] [--coin C] [--timeframe T] [--call BUY|SELL|HOLD] [--from T] [--to T]
         (--url URL --key KEY | --store)      the labelled history to a file (parquet: a directory
                                              of part files); --resume continues an interrupted one
  verify (PATH | --url URL --key KEY | --store) every hash chain end to end; reports the first broken link
  score PATH [--window 7d|30d|90d|all] [--as-of TIME]
                                              the track record from an export file alone

--store reads the event store the service is configured with (EVENT_STORE, LMDB_PATH, ...).`;

export class UsageError extends Error {}

export interface CliDeps {
  /** The configured store, opened on demand (for --store). */
  openStore: () => Promise<EventStore>;
  /** Progress bars go here (stderr); null: no bar. */
  progress: NodeJS.WritableStream | null;
  fetch?: typeof fetch;
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

function urlSource(
  base: string,
  key: string,
  filters: Record<string, string>,
  doFetch: typeof fetch,
): Source {
  return async (after, limit) => {
    const params = new URLSearchParams({ ...filters, limit: String(limit), format: 'ndjson' });
    if (after) params.set('after', after);
    const res = await doFetch(`${base.replace(/\/$/, '')}/api/verdicts?${params}`, {
      headers: { authorization: `Bearer ${key}`, accept: 'application/x-ndjson' },
    });
    if (!res.ok) throw new Error(`GET /api/verdicts answered ${res.status}: ${await res.text()}`);
    const lines = (await res.text()).split('\n').filter((l) => l.trim() !== '');
    const trailer = HistoryTrailer.safeParse(JSON.parse(lines.at(-1) ?? 'null'));
    // No trailer: the response was cut short; the caller retries the page from the same cursor.
    if (!trailer.success)
      throw new Error('the export response ended without its cursor line (connection dropped?)');
    const rows = lines.slice(0, -1).map((l) => JSON.parse(l) as HistoryRow);
    return { rows, cursor: trailer.data.cursor };
  };
}

function storeSource(store: EventStore, filters: Record<string, string>): Source {
  const filter = {
    ...(filters.exchange ? { exchange: filters.exchange as HistoryRow['exchange'] } : {}),
    ...(filters.coin ? { coin: filters.coin.toUpperCase() } : {}),
    ...(filters.timeframe ? { timeframe: filters.timeframe as HistoryRow['timeframe'] } : {}),
    ...(filters.call ? { call: filters.call.toUpperCase() as 'BUY' } : {}),
    ...(filters.from ? { from: parseTime('from', filters.from) } : {}),
    ...(filters.to ? { to: parseTime('to', filters.to) } : {}),
  };
  return async (after, limit) => {
    const cursor = after ? decodeCursor(after) : null;
    if (after && !cursor) throw new UsageError('the saved cursor is not a history cursor');
    const at =
      cursor && cursor.position > 0 ? await store.readAll({ after: cursor.position - 1, maxCount: 1 }) : [];
    const progress = new ScanProgress(cursor?.position ?? 0, at[0]?.id ?? null);
    const rows: HistoryRow[] = [];
    // Offline reading: the store's own clock is wall time.
    for await (const batch of scanHistory(
      store,
      { filter, after: progress.position, limit, now: Date.now },
      progress,
    )) {
      rows.push(...batch);
    }
    return { rows, cursor: progress.cursor, position: progress.position, head: await store.headPosition() };
  };
}

interface Checkpoint {
  format: HistoryFormat;
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

async function exportCommand(
  values: Record<string, unknown>,
  deps: CliDeps,
  source: Source,
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
      throw new UsageError(`nothing to resume: ${checkpointPath} does not exist`);
    checkpoint = JSON.parse(readFileSync(checkpointPath, 'utf8')) as Checkpoint;
    if (checkpoint.format !== format) throw new UsageError(`${out} was started as ${checkpoint.format}`);
    // Drop whatever a dropped page left after the last complete one.
    if (format !== 'parquet' && existsSync(out)) truncateSync(out, checkpoint.bytes);
  } else {
    if (existsSync(out) || existsSync(checkpointPath)) {
      throw new UsageError(`${out} exists: pass --resume to continue it, or remove it`);
    }
    checkpoint = { format: format as HistoryFormat, cursor: null, rows: 0, bytes: 0, parts: 0, done: false };
    if (format === 'parquet') mkdirSync(out, { recursive: true });
    else writeFileSync(out, format === 'csv' ? CSV_HEADER : '');
    checkpoint.bytes = format === 'csv' ? Buffer.byteLength(CSV_HEADER) : 0;
    saveCheckpoint(checkpointPath, checkpoint);
  }
  const bar = deps.progress
    ? new SingleBar({
        stream: deps.progress,
        format: 'export |{bar}| {value}/{total} log positions | {rows} rows',
        noTTYOutput: true,
        notTTYSchedule: 2_000,
      })
    : null;
  bar?.start(1, 0, { rows: checkpoint.rows });
  while (!checkpoint.done) {
    const page = await source(checkpoint.cursor, pageSize);
    if (page.rows.length > 0) {
      if (format === 'parquet') {
        checkpoint.parts++;
        await writePart(join(out, `part-${String(checkpoint.parts).padStart(6, '0')}.parquet`), page.rows);
      } else {
        const text =
          format === 'csv'
            ? page.rows.map(csvLine).join('')
            : page.rows.map((r) => `${JSON.stringify(r)}\n`).join('');
        await appendText(out, text);
        checkpoint.bytes += Buffer.byteLength(text);
      }
    }
    checkpoint.rows += page.rows.length;
    checkpoint.cursor = page.cursor;
    checkpoint.done = page.rows.length < pageSize;
    saveCheckpoint(checkpointPath, checkpoint);
    if (bar) {
      if (page.head !== undefined) bar.setTotal(page.head);
      bar.update(page.position ?? checkpoint.rows, { rows: checkpoint.rows });
    }
  }
  bar?.stop();
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

export async function runHistoryCommand(argv: string[], deps: CliDeps): Promise<string> {
  const [command, ...rest] = argv;
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: rest,
      allowPositionals: true,
      strict: true,
      options: {
        url: { type: 'string' },
        key: { type: 'string' },
        store: { type: 'boolean' },
        out: { type: 'string' },
        format: { type: 'string' },
        resume: { type: 'boolean' },
        page: { type: 'string' },
        window: { type: 'string' },
        'as-of': { type: 'string' },
        ...Object.fromEntries(FILTERS.map((f) => [f, { type: 'string' as const }])),
      },
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { values, positionals } = parsed;
  const filters: Record<string, string> = {};
  for (const f of FILTERS) if (typeof values[f] === 'string') filters[f] = values[f] as string;
  const source = async (): Promise<Source> => {
    if (values.url) {
      if (typeof values.key !== 'string') throw new UsageError('--url needs --key');
      return urlSource(values.url as string, values.key, filters, deps.fetch ?? fetch);
    }
    if (values.store) return storeSource(await deps.openStore(), filters);
    throw new UsageError('say where the history is: --url URL --key KEY, or --store');
  };
  switch (command) {
    case 'export':
      return exportCommand(values, deps, await source());
    case 'verify': {
      const rows = positionals[0] ? readExport(positionals[0]) : sourceRows(await source());
      const report = await verifyRows(rows);
      return JSON.stringify(report, null, 2);
    }
    case 'score': {
      const path = positionals[0];
      if (!path) throw new UsageError('score needs the export file');
      const window = (values.window as string | undefined) ?? 'all';
      if (!(TRACK_RECORD_WINDOWS as readonly string[]).includes(window)) {
        throw new UsageError(`--window must be one of ${TRACK_RECORD_WINDOWS.join(', ')}`);
      }
      const asOf = values['as-of'] ? parseTime('--as-of', values['as-of'] as string) : Date.now();
      return JSON.stringify(await scoreRows(readExport(path), window as TrackRecordWindow, asOf), null, 2);
    }
    default:
      throw new UsageError(command ? `unknown command ${command}` : 'no command');
  }
}
