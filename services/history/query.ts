import type { z } from 'zod';
import {
  HISTORY_FORMATS,
  HISTORY_MAX_LIMIT,
  HISTORY_MAX_WAIT_S,
  type HistoryFormat,
  TRACK_RECORD_WINDOWS,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import { Call, Coin, Exchange, Timeframe } from '../../contracts/market.ts';
import { type Cursor, decodeCursor } from './cursor.ts';
import type { HistoryFilter } from './scan.ts';

/** A bad request, answered 400 `{code, message}`. */
export class HistoryQueryError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

export interface HistoryQuery {
  filter: HistoryFilter;
  after: Cursor | null;
  limit: number;
  waitMs: number;
  format: HistoryFormat;
}

const ALLOWED = new Set([
  'exchange',
  'coin',
  'timeframe',
  'call',
  'from',
  'to',
  'after',
  'limit',
  'format',
  'wait',
]);

/** Date.parse rolls 2025-02-30 over into March; a time that names no real day is refused. */
function realCalendarDate(raw: string): boolean {
  const [y, m, d] = raw.slice(0, 10).split('-').map(Number) as [number, number, number];
  const day = new Date(Date.UTC(y, m - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d;
}

/** ISO 8601 with a zone, or Unix milliseconds. */
export function parseTime(name: string, raw: string): number {
  if (/^\d{1,15}$/.test(raw)) return Number(raw);
  const iso = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;
  const ms = iso.test(raw) && realCalendarDate(raw) ? Date.parse(raw) : Number.NaN;
  if (!Number.isFinite(ms)) {
    throw new HistoryQueryError(
      'INVALID_TIME',
      `${name} must be an ISO 8601 time with a zone (2025-06-01T00:00:00Z) or Unix milliseconds, got "${raw}"`,
    );
  }
  return ms;
}

function single(query: Record<string, unknown>, name: string): string | undefined {
  const value = query[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') {
    throw new HistoryQueryError('INVALID_PARAMETER', `${name} may be given once`);
  }
  return value;
}

const MEDIA: [RegExp, HistoryFormat | 'any'][] = [
  [/^application\/(x-)?ndjson$|^application\/jsonl$|^application\/x-jsonlines$/, 'ndjson'],
  [/^text\/csv$/, 'csv'],
  [/^application\/(vnd\.apache\.)?parquet$|^application\/x-parquet$/, 'parquet'],
  [/^\*\/\*$|^application\/\*$/, 'any'],
];

/** `format=` wins; otherwise the first type of `Accept` we can serve; none given: NDJSON. */
export function negotiateFormat(format: string | undefined, accept: string | undefined): HistoryFormat {
  if (format !== undefined) {
    if (!(HISTORY_FORMATS as readonly string[]).includes(format)) {
      throw new HistoryQueryError(
        'UNSUPPORTED_FORMAT',
        `format must be one of ${HISTORY_FORMATS.join(', ')}, got "${format}"`,
      );
    }
    return format as HistoryFormat;
  }
  if (!accept?.trim()) return 'ndjson';
  const types = accept
    .split(',')
    .map((part) => {
      const [type, ...params] = part.trim().toLowerCase().split(';');
      const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
      return { type: type!.trim(), q: q ? Number(q.slice(2)) : 1 };
    })
    .filter((t) => t.q > 0)
    .sort((a, b) => b.q - a.q);
  for (const { type } of types) {
    const hit = MEDIA.find(([re]) => re.test(type));
    if (hit) return hit[1] === 'any' ? 'ndjson' : hit[1];
  }
  throw new HistoryQueryError(
    'UNSUPPORTED_FORMAT',
    `cannot answer Accept: ${accept}; ask for application/x-ndjson, text/csv or application/vnd.apache.parquet (or format=)`,
  );
}

/** `raw` as `schema` reads it, or a 400 with `code` and `message`. */
function valid<T>(schema: z.ZodType<T>, raw: string, code: string, message: string): T {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new HistoryQueryError(code, message);
  return parsed.data;
}

export function parseHistoryQuery(query: Record<string, unknown>, accept: string | undefined): HistoryQuery {
  for (const name of Object.keys(query)) {
    if (!ALLOWED.has(name)) {
      throw new HistoryQueryError(
        'UNKNOWN_FILTER',
        `unknown parameter "${name}"; known: ${[...ALLOWED].join(', ')}`,
      );
    }
  }
  const filter: HistoryFilter = {};
  const exchange = single(query, 'exchange');
  if (exchange !== undefined) {
    filter.exchange = valid(
      Exchange,
      exchange.toUpperCase(),
      'INVALID_EXCHANGE',
      `exchange must be one of ${Exchange.options.join(', ')}`,
    );
  }
  const coin = single(query, 'coin');
  if (coin !== undefined)
    filter.coin = valid(Coin, coin, 'INVALID_COIN', `coin "${coin}" is not a coin symbol`);
  const timeframe = single(query, 'timeframe');
  if (timeframe !== undefined) {
    filter.timeframe = valid(
      Timeframe,
      timeframe,
      'INVALID_TIMEFRAME',
      `timeframe must be one of ${Timeframe.options.join(', ')}`,
    );
  }
  const call = single(query, 'call');
  if (call !== undefined) {
    filter.call = valid(Call, call.toUpperCase(), 'INVALID_CALL', 'call must be one of BUY, SELL, HOLD');
  }
  const from = single(query, 'from');
  if (from !== undefined) filter.from = parseTime('from', from);
  const to = single(query, 'to');
  if (to !== undefined) filter.to = parseTime('to', to);
  if (filter.from !== undefined && filter.to !== undefined && filter.from > filter.to) {
    throw new HistoryQueryError('INVALID_TIME', 'from is after to');
  }
  const afterText = single(query, 'after');
  let after: Cursor | null = null;
  if (afterText !== undefined) {
    after = decodeCursor(afterText);
    if (!after) throw new HistoryQueryError('INVALID_CURSOR', 'after is not a cursor this service issued');
  }
  const limitText = single(query, 'limit');
  let limit = Number.POSITIVE_INFINITY;
  if (limitText !== undefined) {
    limit = /^\d{1,7}$/.test(limitText) ? Number(limitText) : Number.NaN;
    if (!(limit >= 1 && limit <= HISTORY_MAX_LIMIT)) {
      throw new HistoryQueryError('INVALID_LIMIT', `limit must be an integer from 1 to ${HISTORY_MAX_LIMIT}`);
    }
  }
  const waitText = single(query, 'wait');
  let waitMs = 0;
  if (waitText !== undefined) {
    const wait = /^\d{1,2}(\.\d{1,3})?$/.test(waitText) ? Number(waitText) : Number.NaN;
    if (!(wait >= 0 && wait <= HISTORY_MAX_WAIT_S)) {
      throw new HistoryQueryError('INVALID_WAIT', `wait must be seconds from 0 to ${HISTORY_MAX_WAIT_S}`);
    }
    waitMs = wait * 1000;
  }
  const format = negotiateFormat(single(query, 'format'), accept);
  return { filter, after, limit, waitMs, format };
}

export function parseTrackRecordQuery(query: Record<string, unknown>): { window: TrackRecordWindow } {
  for (const name of Object.keys(query)) {
    if (name !== 'window') {
      throw new HistoryQueryError('UNKNOWN_FILTER', `unknown parameter "${name}"; known: window`);
    }
  }
  const window = single(query, 'window') ?? 'all';
  if (!(TRACK_RECORD_WINDOWS as readonly string[]).includes(window)) {
    throw new HistoryQueryError('INVALID_WINDOW', `window must be one of ${TRACK_RECORD_WINDOWS.join(', ')}`);
  }
  return { window: window as TrackRecordWindow };
}
