import { z } from 'zod';
import { type ErrorCode, errorMessage, ServiceError } from '../../contracts/errors.ts';
import {
  HISTORY_FORMATS,
  HISTORY_MAX_LIMIT,
  HISTORY_MAX_WAIT_S,
  HISTORY_TRAILER_PROFILE,
  type HistoryFormat,
  TRACK_RECORD_WINDOWS,
} from '../../contracts/history.ts';
import { queryOnce } from '../../contracts/http.ts';
import { Call, Coin, Exchange, Timeframe } from '../../contracts/market.ts';
import type { FieldCodes } from '../api/errors.ts';
import { decodeCursor } from './cursor.ts';
import type { HistoryFilter } from './scan.ts';

/** A bad request, answered with its catalog status and these words (the CLI prints them as a usage error). */
export class HistoryQueryError extends ServiceError {
  constructor(code: ErrorCode, message: string, field?: string) {
    super(code, {}, field, { message });
  }
}

/** Date.parse rolls 2025-02-30 over into March; a time that names no real day is refused. */
function realCalendarDate(raw: string): boolean {
  const [y, m, d] = raw.slice(0, 10).split('-').map(Number) as [number, number, number];
  const day = new Date(Date.UTC(y, m - 1, d));
  return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d;
}

/** Ten-digit and nine-digit numbers: Unix seconds of 1973-03-03 to 5138, which as milliseconds are January 1970. */
const UNIX_SECONDS_FROM = 1e8;
const UNIX_SECONDS_TO = 1e11;

/** Unix milliseconds, a date (midnight UTC), or an ISO 8601 time with a zone. */
export function parseTime(name: string, raw: string): number {
  if (/^\d{1,15}$/.test(raw)) {
    const ms = Number(raw);
    // Read as milliseconds, Unix seconds of any time since 1973 fall in the first days of 1970 and
    // would filter silently (from= everything, to= nothing): no verdict is that old, so say so.
    if (ms >= UNIX_SECONDS_FROM && ms < UNIX_SECONDS_TO) {
      throw new HistoryQueryError(
        'INVALID_TIME',
        `${name} ${raw} reads as ${new Date(ms).toISOString()} in Unix milliseconds: Unix seconds? Give milliseconds (${raw}000) or an ISO 8601 time (${new Date(ms * 1000).toISOString()})`,
      );
    }
    return ms;
  }
  const iso = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;
  const ms = iso.test(raw) && realCalendarDate(raw) ? Date.parse(raw) : Number.NaN;
  if (!Number.isFinite(ms)) {
    throw new HistoryQueryError(
      'INVALID_TIME',
      `${name} must be Unix milliseconds, a date (2025-06-01, read as 00:00 UTC) or an ISO 8601 time with a zone (2025-06-01T00:00:00Z, 2025-06-01T02:00+02:00), got "${raw}"`,
    );
  }
  return ms;
}

/** The media types each format is served as (the wildcards: covers). */
const MEDIA: [RegExp, HistoryFormat][] = [
  [/^application\/(x-)?ndjson$|^application\/jsonl$|^application\/x-jsonlines$/, 'ndjson'],
  [/^text\/csv$/, 'csv'],
  [/^application\/(vnd\.apache\.)?parquet$|^application\/x-parquet$/, 'parquet'],
];

const NDJSON_TYPE = MEDIA.find(([, format]) => format === 'ndjson')![0];

/**
 * The media ranges of `Accept`, in its order: each type, its q (1 when unsaid), and whether it
 * asks for the trailer profile.
 */
function mediaRanges(accept: string): { type: string; q: number; trailer: boolean }[] {
  return accept.split(',').map((part) => {
    const [type, ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const trailer = params.some((p) => p.trim().replaceAll('"', '') === `profile=${HISTORY_TRAILER_PROFILE}`);
    return { type: type!.trim(), q: q ? Number(q.slice(2)) : 1, trailer };
  });
}

/**
 * The formats a media range covers, and how specifically it names them: RFC 9110 weighs a format
 * by its most specific range (`text/csv` over `text/*` over `*\/*`).
 */
function covers(type: string): { formats: HistoryFormat[]; specificity: number } | null {
  if (type === '*/*') return { formats: ['ndjson', 'csv', 'parquet'], specificity: 1 };
  if (type === 'application/*') return { formats: ['ndjson', 'parquet'], specificity: 2 };
  // "text/*" takes any text type: CSV is the one served.
  if (type === 'text/*') return { formats: ['csv'], specificity: 2 };
  const hit = MEDIA.find(([re]) => re.test(type));
  return hit ? { formats: [hit[1]], specificity: 3 } : null;
}

/**
 * The media range of `Accept` an answer is served as: the first we can serve, by q; null when none.
 * A format takes the q of its most specific range (RFC 9110): a wider range beside it asks nothing
 * for it (`application/x-ndjson;q=0, *\/*` takes the next format `*\/*` covers, `*\/*,
 * application/x-ndjson;q=0.1` serves CSV), and a narrower one asks for its own (`text/*;q=0,
 * text/csv`); a most specific range at q=0 makes it not acceptable.
 */
function chosenRange(
  ranges: ReturnType<typeof mediaRanges>,
): { format: HistoryFormat; trailer: boolean } | null {
  const weighed = ranges
    // With the profile, q=0 refuses only the trailer line (negotiateAnswer), not the format.
    .filter((t) => !(t.trailer && t.q === 0))
    .flatMap((t) => {
      const covered = covers(t.type);
      return covered ? [{ ...covered, q: t.q, trailer: t.trailer }] : [];
    });
  const decides = (range: (typeof weighed)[number], format: HistoryFormat) => {
    const naming = weighed.filter((c) => c.formats.includes(format));
    const top = Math.max(...naming.map((c) => c.specificity));
    return range.specificity === top && !naming.some((c) => c.specificity === top && c.q === 0);
  };
  for (const range of weighed.filter((c) => c.q > 0).sort((a, b) => b.q - a.q)) {
    const format = range.formats.find((f) => decides(range, f));
    if (format) return { format, trailer: range.trailer };
  }
  return null;
}

/** What GET /api/verdicts answers as: its format, and whether an NDJSON answer ends with the trailer line. */
export interface HistoryAnswer {
  format: HistoryFormat;
  trailer: boolean;
}

/**
 * The answer's format and trailer line from `format=`, `trailer=` and `Accept`, the header read
 * once. The format: `format=` wins; otherwise the first type of `Accept` we can serve; none given:
 * NDJSON. The trailer line: `trailer=` wins; otherwise an NDJSON type in `Accept` with
 * `profile="trailer"` asks for it; none: rows only, so that a JSON-lines reader reads the file as
 * served (every row carries its own cursor). The line is NDJSON's: asked of CSV or Parquet
 * (trailer=true, or the profile on the Accept range the answer is served as) it would be left out
 * without a word, so it is refused. A profile on a range not chosen (`text/csv,
 * application/x-ndjson; profile="trailer"` served as CSV) asks nothing of the answer.
 */
export function negotiateAnswer(
  format: string | undefined,
  trailer: boolean | undefined,
  accept: string | undefined,
): HistoryAnswer {
  const ranges = accept?.trim() ? mediaRanges(accept) : [];
  let served: HistoryFormat = 'ndjson';
  let byProfile = false;
  if (format !== undefined) {
    if (!(HISTORY_FORMATS as readonly string[]).includes(format)) {
      throw new HistoryQueryError(
        'UNSUPPORTED_FORMAT',
        `format must be one of ${HISTORY_FORMATS.join(', ')}, got "${format}"`,
        'format',
      );
    }
    served = format as HistoryFormat;
  } else if (ranges.length > 0) {
    const chosen = chosenRange(ranges);
    if (chosen === null) {
      throw new HistoryQueryError(
        'UNSUPPORTED_FORMAT',
        `cannot answer Accept: ${accept}; ask for application/x-ndjson, text/csv or application/vnd.apache.parquet (or format=)`,
        // The header refused, named as a query parameter is: {code, message, field}.
        'accept',
      );
    }
    served = chosen.format;
    byProfile = trailer === undefined && chosen.trailer;
  }
  if ((trailer === true || byProfile) && served !== 'ndjson') {
    throw new HistoryQueryError(
      'UNSUPPORTED_FORMAT',
      `${byProfile ? `Accept: ${accept} asks for the trailer line, which` : 'trailer=true'} ends an NDJSON answer with its cursor line; ${served} has no such line: every row carries its cursor, and the HTTP trailer X-History-Cursor the last one`,
      byProfile ? 'accept' : 'trailer',
    );
  }
  return {
    format: served,
    // A range given q=0 refuses what it names: its profile asks for nothing.
    trailer: trailer ?? ranges.some((range) => NDJSON_TYPE.test(range.type) && range.trailer && range.q > 0),
  };
}

type Ctx = z.core.$RefinementCtx;

/** A custom issue carrying the catalog code the history family answers it with. */
function issue(ctx: Ctx, code: ErrorCode, message: string, path?: string): void {
  ctx.addIssue({ code: 'custom', message, params: { code }, ...(path ? { path: [path] } : {}) });
}

const upper = (value: unknown) => (typeof value === 'string' ? value.toUpperCase() : value);

/** A time parameter (parseTime's forms), as a number of milliseconds. */
const time = (name: string) =>
  queryOnce(
    z
      .string()
      .transform((raw, ctx) => {
        try {
          return parseTime(name, raw);
        } catch (err) {
          issue(ctx, 'INVALID_TIME', (err as Error).message);
          return z.NEVER;
        }
      })
      .describe('Unix milliseconds, a date (midnight UTC), or an ISO 8601 time with a zone'),
  ).optional();

/** Decimal digits only, so `limit=1e3` or `wait=0x10` are refused rather than read as numbers. */
const decimal = (pattern: RegExp) => (value: unknown) =>
  typeof value === 'string' && pattern.test(value) ? Number(value) : value;

/** GET /api/verdicts: the filters, the cursor, the page, the wait and the format, typed and bounded. */
export const HistoryQuerySchema = z
  .strictObject({
    // exchange and call are read in any case (integrators send call=buy; the listed spelling is
    // upper case, which the document gives), timeframe and format exactly (1m is not 1M).
    exchange: queryOnce(
      z.preprocess(
        upper,
        z.enum(Exchange.options, { error: `exchange must be one of ${Exchange.options.join(', ')}` }),
      ),
    ).optional(),
    coin: queryOnce(Coin.describe('A coin symbol')).optional(),
    timeframe: queryOnce(
      z.enum(Timeframe.options, { error: `timeframe must be one of ${Timeframe.options.join(', ')}` }),
    ).optional(),
    call: queryOnce(
      z.preprocess(upper, z.enum(Call.options, { error: 'call must be one of BUY, SELL, HOLD' })),
    ).optional(),
    from: time('from'),
    to: time('to'),
    after: queryOnce(
      z
        .string()
        .transform((text, ctx) => {
          const cursor = decodeCursor(text);
          if (cursor === null) issue(ctx, 'INVALID_CURSOR', errorMessage('INVALID_CURSOR'));
          return cursor ?? z.NEVER;
        })
        .describe('The cursor of an earlier answer'),
    ).optional(),
    limit: queryOnce(z.preprocess(decimal(/^\d{1,7}$/), z.number().int().min(1).max(HISTORY_MAX_LIMIT)))
      .optional()
      .describe(`Rows at most, 1–${HISTORY_MAX_LIMIT}`),
    format: queryOnce(
      z.enum(HISTORY_FORMATS, { error: `format must be one of ${HISTORY_FORMATS.join(', ')}` }),
    )
      .optional()
      .describe('Or the Accept header'),
    wait: queryOnce(z.preprocess(decimal(/^\d{1,2}(\.\d{1,3})?$/), z.number().min(0).max(HISTORY_MAX_WAIT_S)))
      .optional()
      .describe(`Seconds to long-poll for new rows, 0–${HISTORY_MAX_WAIT_S}`),
    trailer: queryOnce(
      z
        .enum(['true', 'false'], { error: 'trailer must be true or false' })
        .transform((value) => value === 'true'),
    )
      .optional()
      .describe(
        'NDJSON only: true ends the answer with the line {cursor, rows, _service} (or Accept: application/x-ndjson; profile="trailer"); default false, rows only',
      ),
  })
  .superRefine((query, ctx) => {
    if (query.from !== undefined && query.to !== undefined && query.from > query.to) {
      issue(ctx, 'INVALID_TIME', 'from is after to', 'from');
    }
  });
export type HistoryQueryInput = z.output<typeof HistoryQuerySchema>;

/** GET /api/track-record. */
export const TrackRecordQuerySchema = z.strictObject({
  window: queryOnce(z.enum(TRACK_RECORD_WINDOWS)).default('all'),
});

/** The history family's codes per parameter (the error handler reads them beside the schema). */
export const HISTORY_QUERY_CODES = {
  fields: {
    exchange: 'INVALID_EXCHANGE',
    coin: 'INVALID_COIN',
    timeframe: 'INVALID_TIMEFRAME',
    call: 'INVALID_CALL',
    from: 'INVALID_TIME',
    to: 'INVALID_TIME',
    after: 'INVALID_CURSOR',
    limit: 'INVALID_LIMIT',
    format: 'UNSUPPORTED_FORMAT',
    wait: 'INVALID_WAIT',
    trailer: 'UNSUPPORTED_FORMAT',
    window: 'INVALID_WINDOW',
  },
  unknown: 'UNKNOWN_FILTER',
  params: {
    INVALID_LIMIT: { max: HISTORY_MAX_LIMIT },
    INVALID_WAIT: { max: HISTORY_MAX_WAIT_S },
    INVALID_WINDOW: { allowed: TRACK_RECORD_WINDOWS.join(', ') },
  },
} as const satisfies FieldCodes;

/** The filter a typed query asks for. */
export function historyFilter(query: HistoryQueryInput): HistoryFilter {
  const { exchange, coin, timeframe, call, from, to } = query;
  return {
    ...(exchange !== undefined ? { exchange } : {}),
    ...(coin !== undefined ? { coin } : {}),
    ...(timeframe !== undefined ? { timeframe } : {}),
    ...(call !== undefined ? { call } : {}),
    ...(from !== undefined ? { from } : {}),
    ...(to !== undefined ? { to } : {}),
  };
}
