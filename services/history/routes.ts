import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Readable } from 'node:stream';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { unservedAnswer } from '../../adapters/market/errors.ts';
import type { KnownCoins } from '../../adapters/market/known-coins.ts';
import { type ErrorCode, errorMessage, ServiceError } from '../../contracts/errors.ts';
import {
  HISTORY_MEDIA_TYPES,
  HistoryRow,
  HistoryTrailer,
  TrackRecordResponse,
} from '../../contracts/history.ts';
import { jsonSchema } from '../../contracts/json-schema.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { openToAnyOrigin } from '../api/cors.ts';
import { apiErrorBody, errorHandler } from '../api/errors.ts';
import { declared, documented, RESPONSE_HEADERS, refusal } from '../api/openapi.ts';
import {
  callerHook,
  decorateCaller,
  keyRefusal,
  keyStillLive,
  undebitedService,
} from '../metering/caller.ts';
import type { QuotaMeter } from '../metering/quota-meter.ts';
import { onResponseClosed } from '../shared/response-closed.ts';
import { type Cursor, tagMatches } from './cursor.ts';
import { trackRecordPage, trackRecordPolicy } from './page.ts';
import { type ParquetEncoders, sharedParquetEncoders } from './parquet-encoders.ts';
import {
  HISTORY_QUERY_CODES,
  HistoryQueryError,
  HistoryQuerySchema,
  historyFilter,
  negotiateAnswer,
  TrackRecordQuerySchema,
} from './query.ts';
import type { RecordCache } from './record-cache.ts';
import { type OutcomeIndex, ScanProgress, type StoredRows, scanHistory } from './scan.ts';
import type { ServedVenues } from './served-venues.ts';
import { historyStream, type RowSource, readyParquetStream } from './writers.ts';

export interface HistoryRoutesDeps {
  store: EventStore;
  /** The answers of GET /api/track-record, shared with get_track_record. */
  records: RecordCache;
  /** Which verdicts have an outcome (a projection): the export reads outcome streams only for those. */
  outcomes?: OutcomeIndex;
  /** Revealed rows as stored bytes (the export-rows projection), where the store keeps them. */
  stored?: StoredRows;
  /** The reveal clock: no content leaves before this clock passes its reveal time. */
  now: () => number;
  /** Refuses a coin filter the service does not know, as the tools do (unknown_coin). */
  coins?: Pick<KnownCoins, 'check'>;
  /** Refuses a venue or timeframe filter the service does not serve nor hold, as the tools do. */
  venues?: Pick<ServedVenues, 'check'>;
  quota?: Pick<QuotaMeter, 'peek'>;
  logger: Logger;
  pageSize?: number;
  /**
   * Long polls (`wait` > 0) one key may hold waiting at once in this process; one more is answered
   * at once, as `wait=0` would (HISTORY_MAX_LONG_POLLS_PER_KEY). Unset: 4.
   */
  maxLongPolls?: number;
  /**
   * Exports (requests other than a long poll holding its place) one key may stream at once in this
   * process; one more is refused 429 TOO_MANY_EXPORTS with Retry-After. Unset: MAX_EXPORTS_PER_KEY.
   */
  maxExports?: number;
}

/**
 * Exports one key streams at once per process: as many as the Parquet encoder has workers, so one
 * key alone never waits for a worker behind its own exports (past the workers, exports wait for
 * one in turn: parquet-encoders.ts), and one key's export loops hold a bounded share of the scan.
 */
export const MAX_EXPORTS_PER_KEY = 2;
/** Retry-After of TOO_MANY_EXPORTS: an export of the whole history takes about a second. */
const EXPORT_RETRY_SECONDS = 1;
/**
 * Parquet answers waiting for an encoder worker in this process, past which the next is refused
 * 503 before its headers (Retry-After: a second per export ahead of it per worker) rather than
 * wait in turn after them. Each waiting one holds a connection and its scan, and every key may
 * add its MAX_EXPORTS_PER_KEY: unbounded, the last of many keys' exports waited for every one
 * before it with its 200 already sent. At about a second an export, 8 wait 4 s on 2 workers.
 */
export const MAX_PARQUET_WAITING = 8;

const require = createRequire(import.meta.url);

const fail = (codes: readonly [ErrorCode, ...ErrorCode[]], note?: string) => refusal(codes, note);
const VERDICTS_ROUTE = declared({
  summary: 'The labelled verdict history, streamed (NDJSON, CSV or Parquet), resumable by cursor',
  description:
    'Rows in log order; a verdict younger than its reveal time shows only its commitment. Every row carries its cursor (the last column): after=<cursor> with the same filters resumes after that row, so a stream cut mid-way resumes from its last complete row. NDJSON ends with a trailer line {cursor, rows, _service} only when asked (trailer=true, or Accept: application/x-ndjson; profile="trailer"); every format sends the cursor as the X-History-Cursor HTTP trailer. exchange and call are read in any case (call=buy is call=BUY), as is coin; timeframe and format take the listed values exactly (1m is not 1M).',
  tags: ['history'],
  auth: 'bearer',
  sends: ['Cache-Control'],
  query: HistoryQuerySchema,
  codes: HISTORY_QUERY_CODES,
  responses: {
    200: {
      description: 'One row per verdict',
      headers: {
        'X-Service-Meta': 'The `_service` block (caller and quota) as JSON',
        'Content-Disposition': 'Parquet only: attachment; filename="verdicts.parquet"',
        'X-History-Cursor': RESPONSE_HEADERS['X-History-Cursor'],
        Trailer: RESPONSE_HEADERS.Trailer,
      },
      content: {
        [HISTORY_MEDIA_TYPES.ndjson]: {
          description:
            'Each line is a row; with trailer=true (or the Accept profile "trailer") the last line is the trailer {cursor, rows, _service}',
          anyOf: [jsonSchema(HistoryRow, 'output'), jsonSchema(HistoryTrailer, 'output')],
        },
        [HISTORY_MEDIA_TYPES.csv]: {
          type: 'string',
          contentMediaType: HISTORY_MEDIA_TYPES.csv,
          description: `RFC 4180 CSV: a header line naming the columns (${Object.keys(HistoryRow.shape).join(', ')}), then one line per row`,
        },
        [HISTORY_MEDIA_TYPES.parquet]: {
          type: 'string',
          format: 'binary',
          contentMediaType: HISTORY_MEDIA_TYPES.parquet,
          description: 'An Apache Parquet file, one row per verdict (the columns of the NDJSON rows)',
        },
      },
    },
    400: fail([
      'INVALID_EXCHANGE',
      'INVALID_COIN',
      'INVALID_TIMEFRAME',
      'INVALID_CALL',
      'INVALID_TIME',
      'INVALID_CURSOR',
      'FOREIGN_CURSOR',
      'INVALID_LIMIT',
      'INVALID_WAIT',
      'UNSUPPORTED_FORMAT',
      'INVALID_PARAMETER',
      'UNKNOWN_FILTER',
    ]),
    401: fail(['UNAUTHORIZED'], 'A live API key is required'),
    404: fail(
      ['unknown_coin'],
      'The coin is listed on no venue asked and the history holds none of it (as the tools refuse it)',
    ),
    422: fail(
      ['unsupported_exchange', 'unsupported_timeframe'],
      'The venue or timeframe is served by no market of the feed and the history holds none of it (as the tools refuse it)',
    ),
    429: fail(
      ['TOO_MANY_EXPORTS', 'RATE_LIMITED'],
      `TOO_MANY_EXPORTS: the key already streams ${MAX_EXPORTS_PER_KEY} exports in this process (a long poll holding its place aside), with Retry-After; RATE_LIMITED: the rate limit, with Retry-After`,
    ),
    503: fail(
      ['KEY_UNVERIFIABLE', 'SERVICE_UNAVAILABLE'],
      `KEY_UNVERIFIABLE: the key could not be checked right now; retry. SERVICE_UNAVAILABLE: a Parquet answer while ${MAX_PARQUET_WAITING} already wait for an encoder in this process, with Retry-After (nothing sent)`,
    ),
  },
});
/** GET /api/track-record's options: exported for the test that serves its answer made fresh on them. */
export const TRACK_RECORD_ROUTE = declared({
  summary:
    "Track record: hit rates per venue, timeframe and confidence bucket against random calls; the risk forecast's band coverage and σ served ÷ realised; the shipped baselines and carry fit",
  tags: ['history'],
  sends: ['Cache-Control'],
  query: TrackRecordQuerySchema,
  codes: HISTORY_QUERY_CODES,
  responses: {
    200: {
      description:
        'The track record over the window: the same bytes for every caller, cached publicly (Cache-Control public), so without the per-caller `_service` block; a refusal carries it',
      schema: TrackRecordResponse,
    },
    400: fail(['INVALID_WINDOW', 'INVALID_PARAMETER', 'UNKNOWN_FILTER']),
  },
});
const PAGE_DOC = documented({
  summary: 'The track-record page (charts)',
  tags: ['history'],
  sends: ['Cache-Control', 'Content-Security-Policy', 'X-Frame-Options'],
  responses: { 200: { description: 'HTML', schema: { type: 'string' }, contentTypes: ['text/html'] } },
});
const ASSET_ROUTE = declared({
  summary: 'Scripts and styles of the track-record page',
  tags: ['history'],
  sends: ['Cache-Control'],
  params: z.object({ file: z.string().describe('uPlot.iife.min.js or uPlot.min.css') }),
  responses: {
    200: {
      description: 'The asset',
      schema: { type: 'string' },
      contentTypes: ['text/javascript', 'text/css'],
    },
    404: fail(['NOT_FOUND']),
  },
});
/**
 * A venue or timeframe filter the service does not serve nor hold, refused with the feed's code
 * and words, as get_trade_call and the scans refuse it, naming the filter.
 */
async function checkVenue(
  venues: Pick<ServedVenues, 'check'> | undefined,
  query: { exchange?: Exchange | undefined; timeframe?: Timeframe | undefined },
): Promise<void> {
  try {
    await venues?.check({ exchange: query.exchange, timeframe: query.timeframe });
  } catch (err) {
    throw unservedAnswer(err) ?? err;
  }
}

function uplotAsset(file: string): Buffer {
  return readFileSync(require.resolve(`uplot/dist/${file}`));
}

/** The keyed side of /api/verdicts: the auth hook, and where a cursor resumes. */
function historyAccess(deps: HistoryRoutesDeps) {
  /**
   * The auth hook of /api/verdicts: a live key, resolved once (`request.caller`). A refused call's
   * `_service` carries the quota it counts against without the key, as every answer's does
   * (contract 8: any response).
   */
  const requireKey = callerHook(() => deps, {
    rejected: keyRefusal(() => new HistoryQueryError('UNAUTHORIZED', 'the API key is unknown or revoked')),
    keyless: ({ auth: { detail } }) =>
      new HistoryQueryError('UNAUTHORIZED', `${errorMessage('UNAUTHORIZED')}${detail ? ` (${detail})` : ''}`),
  });

  async function startAfter(cursor: Cursor): Promise<string | null> {
    const { position } = cursor;
    if (position === 0) return null;
    const [event] = await deps.store.readAll({ after: position - 1, maxCount: 1 });
    if (event?.position !== position || !tagMatches(cursor, event.id)) {
      throw new HistoryQueryError('FOREIGN_CURSOR', errorMessage('FOREIGN_CURSOR'), 'after');
    }
    return event.id;
  }

  /** The `_service` of a keyed call, learnt once its key is known: every answer carries it, refusals too. */
  async function withService(request: FastifyRequest): Promise<void> {
    request.service = await undebitedService(deps.quota, request.caller!);
  }

  return { requireKey, withService, startAfter };
}

/**
 * GET /api/verdicts (Bearer key; the labelled history, streamed), GET /api/track-record
 * (public, cacheable) and GET /track-record (the page, with uPlot served from node_modules).
 */
/**
 * A Parquet answer with MAX_PARQUET_WAITING already waiting for a worker: refused 503 before any
 * header, so the client retries instead of holding a 200 that sends nothing for a long while.
 */
function refuseParquetPastQueue(encoders: ParquetEncoders): void {
  const waiting = encoders.queued;
  if (waiting < MAX_PARQUET_WAITING) return;
  const seconds = Math.max(1, Math.ceil(waiting / encoders.capacity)) * EXPORT_RETRY_SECONDS;
  throw new ServiceError(
    'SERVICE_UNAVAILABLE',
    {
      detail: `${waiting} Parquet exports already wait for an encoder in this process; retry in ${seconds} s (NDJSON and CSV are not held by them)`,
    },
    undefined,
    { headers: { 'retry-after': String(seconds) } },
  );
}

export function historyRoutes(deps: HistoryRoutesDeps): FastifyPluginAsync {
  // A Map, not an object literal: a name such as `constructor` or `__proto__` must not find the
  // prototype's member and be served as an asset.
  const assets = new Map([
    ['uPlot.iife.min.js', { body: uplotAsset('uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' }],
    ['uPlot.min.css', { body: uplotAsset('uPlot.min.css'), type: 'text/css; charset=utf-8' }],
  ]);

  const { requireKey, withService, startAfter } = historyAccess(deps);
  const longPolls = new LongPolls(deps.maxLongPolls ?? 4);
  const maxExports = deps.maxExports ?? MAX_EXPORTS_PER_KEY;
  const exports = new LongPolls(maxExports);
  // The encoders Parquet answers take (the process's, shared by every export).
  const encoders = sharedParquetEncoders();

  return async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    // Any page may read the track record and, with a key, the history; the page itself and its
    // assets are the service's own (never framed, nothing to read from elsewhere).
    openToAnyOrigin(plain, { except: ['/track-record', '/track-record/assets/:file'] });
    decorateCaller(plain);
    // Shutting down: a long poll stops waiting and answers the rows it has (none, with its cursor),
    // so its client resumes from it, rather than have its connection cut after the grace.
    let closing = false;
    plain.addHook('preClose', async () => {
      closing = true;
    });
    // Refusals are per request: each carries the caller's `_service`, and the handler sends them no-store.
    plain.setErrorHandler(errorHandler(apiErrorBody));

    app.get(
      '/api/verdicts',
      { ...VERDICTS_ROUTE, preValidation: [requireKey, withService] },
      async (request, reply) => {
        const { query } = request;
        const service = request.service!;
        const { format, trailer: trailerLine } = negotiateAnswer(
          query.format,
          query.trailer,
          request.headers.accept,
        );
        await checkVenue(deps.venues, query);
        if (query.coin !== undefined) await deps.coins?.check(query.coin, query.exchange, 'coin');
        const after: Cursor = query.after ?? { position: 0, tag: '', tagAt: 'end' };
        const progress = new ScanProgress(after.position, await startAfter(after));
        const abort = new AbortController();
        // A long poll holds one of its key's places until its answer closes; with none free it
        // waits for nothing (answers the rows there are, as wait=0).
        const key = request.caller!.subject.id;
        const waits = (query.wait ?? 0) > 0 && longPolls.take(key);
        // Any other answer is an export: a bounded number each key streams at once.
        const streams = waits === false ? exports.take(key) : false;
        if (waits === false && streams === false) {
          throw new ServiceError('TOO_MANY_EXPORTS', { max: maxExports }, undefined, {
            headers: { 'retry-after': String(EXPORT_RETRY_SECONDS) },
          });
        }
        // The response closes when it is done or when the client goes away (perhaps already, while
        // the checks above awaited): either way, stop reading, and give the key's place back.
        onResponseClosed(reply.raw, () => {
          abort.abort();
          if (waits !== false) waits();
          if (streams !== false) streams();
        });
        if (abort.signal.aborted) return;
        const waitUntil = waits === false ? 0 : Date.now() + (query.wait ?? 0) * 1000;
        const scanOptions = {
          filter: historyFilter(query),
          after: progress.position,
          limit: query.limit ?? Number.POSITIVE_INFINITY,
          // Read at each look for new rows (at most 250 ms apart): the end of the wait moves to now
          // once the server is closing.
          get waitUntil() {
            return closing ? 0 : waitUntil;
          },
          live: () => keyStillLive(request),
          now: deps.now,
          signal: abort.signal,
          ...(deps.outcomes ? { outcomes: deps.outcomes } : {}),
          ...(deps.stored ? { stored: deps.stored } : {}),
          ...(deps.pageSize ? { pageSize: deps.pageSize } : {}),
        };
        const trailer = trailerLine
          ? () => ({ cursor: progress.cursor, rows: progress.rows, _service: service })
          : null;
        const source: RowSource = (make, fromStore) =>
          scanHistory(deps.store, scanOptions, progress, make, fromStore);
        let body: Readable;
        if (format === 'parquet') {
          // An encoder worker is taken only once the scan has rows to encode (or has ended with
          // none): a long poll waits for its rows without one.
          const ready = await readyParquetStream(source, deps.stored !== undefined);
          if (abort.signal.aborted) {
            // The client left while it waited: nothing to encode, nothing to send.
            await ready.cancel();
            return;
          }
          // Checked in the same turn as the export is queued (no await between): the count
          // cannot move past the bound between the check and the queue.
          try {
            refuseParquetPastQueue(encoders);
          } catch (err) {
            await ready.cancel();
            throw err;
          }
          body = ready.stream();
        } else {
          // Nothing pending in the answer nor its socket: every chunk written so far is with the
          // kernel, so the writer may write into one again (writers.ts `sent`).
          body = historyStream(format, source, trailer, () => reply.raw.writableLength === 0);
        }
        reply
          .header('content-type', HISTORY_MEDIA_TYPES[format])
          .header('cache-control', 'no-store')
          .header('x-service-meta', JSON.stringify(service))
          .trailer('x-history-cursor', async () => progress.cursor);
        if (format === 'parquet')
          reply.header('content-disposition', 'attachment; filename="verdicts.parquet"');
        return reply.send(body);
      },
    );

    app.get('/api/track-record', TRACK_RECORD_ROUTE, async (request, reply) => {
      // The answer's JSON as the cache keeps it (the content type Fastify gives a JSON object).
      reply
        .header('cache-control', 'public, max-age=60')
        .header('content-type', 'application/json; charset=utf-8');
      return deps.records.currentJson(request.query.window, deps.now());
    });

    app.get('/track-record', { config: PAGE_DOC }, async (_request, reply) =>
      reply
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'public, max-age=300')
        .header('content-security-policy', trackRecordPolicy())
        .header('x-frame-options', 'DENY')
        .send(trackRecordPage()),
    );

    app.get('/track-record/assets/:file', ASSET_ROUTE, async (request, reply) => {
      const asset = assets.get(request.params.file);
      if (!asset) throw new ServiceError('NOT_FOUND', { detail: 'no such asset' });
      return reply
        .header('content-type', asset.type)
        .header('cache-control', 'public, max-age=86400')
        .send(asset.body);
    });
  };
}

/**
 * Places per key: long polls waiting (a bounded number each, so one key cannot hold hundreds of
 * sockets open), and exports streaming.
 */
class LongPolls {
  private readonly held = new Map<string, number>();
  constructor(private readonly max: number) {}

  /** A place for `key`'s long poll, as the function that frees it (once); false when all are taken. */
  take(key: string): (() => void) | false {
    const n = this.held.get(key) ?? 0;
    if (n >= this.max) return false;
    this.held.set(key, n + 1);
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      const left = (this.held.get(key) ?? 1) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
    };
  }
}
