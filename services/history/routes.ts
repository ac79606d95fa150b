import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { EventStore } from '../../adapters/event-store/port.ts';
import {
  HISTORY_MAX_LIMIT,
  HISTORY_MAX_WAIT_S,
  HISTORY_MEDIA_TYPES,
  HistoryRow,
  HistoryTrailer,
  TrackRecordResponse,
  TrackRecordWindow,
} from '../../contracts/history.ts';
import { queryInt } from '../../contracts/http.ts';
import { jsonSchema } from '../../contracts/json-schema.ts';
import { Call, Exchange, Timeframe } from '../../contracts/market.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { documented, error } from '../api/openapi.ts';
import { presentedCredential, type ServiceMeta } from '../api/service-meta.ts';
import { isWellFormedKey } from '../keys/key-material.ts';
import { type KeyResolver, KeyUnverifiableError } from '../keys/key-resolver.ts';
import type { QuotaMeter } from '../quota/quota-meter.ts';
import { tagMatches } from './cursor.ts';
import { trackRecordPage } from './page.ts';
import { HistoryQueryError, parseHistoryQuery, parseTrackRecordQuery } from './query.ts';
import { type OutcomeIndex, ScanProgress, type StoredRows, scanHistory } from './scan.ts';
import { type TrackRecordState, trackRecord } from './track-record.ts';
import { historyStream } from './writers.ts';

export interface HistoryRoutesDeps {
  store: EventStore;
  trackRecord: Pick<ProjectionRunner<TrackRecordState>, 'state'>;
  /** Which verdicts have an outcome (a projection): the export reads outcome streams only for those. */
  outcomes?: OutcomeIndex;
  /** Revealed rows as stored bytes (the export-rows projection), where the store keeps them. */
  stored?: StoredRows;
  /** The reveal clock: no content leaves before this clock passes its reveal time. */
  now: () => number;
  keys: Pick<KeyResolver, 'resolve'>;
  quota?: Pick<QuotaMeter, 'peek'>;
  logger: Logger;
  pageSize?: number;
}

const require = createRequire(import.meta.url);

const time = z.string().describe('ISO 8601 with a zone, or Unix milliseconds');
const VERDICTS_DOC = documented({
  summary: 'The labelled verdict history, streamed (NDJSON, CSV or Parquet), resumable by cursor',
  description:
    'Rows in log order; a verdict younger than its reveal time shows only its commitment. NDJSON ends with a trailer line {cursor, rows, _service}; every format sends the cursor as the X-History-Cursor trailer.',
  tags: ['history'],
  auth: 'bearer',
  query: z.object({
    exchange: Exchange.optional(),
    coin: z.string().optional(),
    timeframe: Timeframe.optional(),
    call: Call.optional(),
    from: time.optional(),
    to: time.optional(),
    after: z.string().optional().describe('The cursor of an earlier answer'),
    limit: queryInt(1, HISTORY_MAX_LIMIT).optional(),
    format: z.enum(['ndjson', 'csv', 'parquet']).optional().describe('Or the Accept header'),
    wait: queryInt(0, HISTORY_MAX_WAIT_S).optional().describe('Seconds to long-poll for new rows'),
  }),
  responses: {
    200: {
      description: 'One row per verdict',
      content: {
        [HISTORY_MEDIA_TYPES.ndjson]: {
          description: 'Each line is a row, and the last line the trailer {cursor, rows, _service}',
          anyOf: [jsonSchema(HistoryRow, 'output'), jsonSchema(HistoryTrailer, 'output')],
        },
        [HISTORY_MEDIA_TYPES.csv]: { type: 'string', description: 'A header line, then one line per row' },
        [HISTORY_MEDIA_TYPES.parquet]: {
          type: 'string',
          contentMediaType: HISTORY_MEDIA_TYPES.parquet,
          description: 'An Apache Parquet file, one row per verdict',
        },
      },
    },
    400: error(
      'INVALID_EXCHANGE, INVALID_COIN, INVALID_TIMEFRAME, INVALID_CALL, INVALID_TIME, INVALID_CURSOR, FOREIGN_CURSOR, INVALID_LIMIT, INVALID_WAIT, UNSUPPORTED_FORMAT, INVALID_PARAMETER, UNKNOWN_FILTER',
    ),
    401: error('UNAUTHORIZED: a live API key is required'),
  },
});
const TRACK_RECORD_DOC = documented({
  summary: 'Track record: hit rates per venue, timeframe and confidence bucket against random calls',
  tags: ['history'],
  query: z.object({ window: TrackRecordWindow.optional() }),
  responses: {
    200: { description: 'The track record over the window', schema: TrackRecordResponse },
    400: error('INVALID_WINDOW, UNKNOWN_FILTER'),
  },
});
const PAGE_DOC = documented({
  summary: 'The track-record page (charts)',
  tags: ['history'],
  responses: { 200: { description: 'HTML', schema: { type: 'string' }, contentTypes: ['text/html'] } },
});
const ASSET_DOC = documented({
  summary: 'Scripts and styles of the track-record page',
  tags: ['history'],
  params: z.object({ file: z.string() }),
  responses: {
    200: {
      description: 'The asset',
      schema: { type: 'string' },
      contentTypes: ['text/javascript', 'text/css'],
    },
    404: error('NOT_FOUND'),
  },
});
function uplotAsset(file: string): Buffer {
  return readFileSync(require.resolve(`uplot/dist/${file}`));
}

/**
 * GET /api/verdicts (Bearer key; the labelled history, streamed), GET /api/track-record
 * (public, cacheable) and GET /track-record (the page, with uPlot served from node_modules).
 */
export function historyRoutes(deps: HistoryRoutesDeps): FastifyPluginAsync {
  const assets = {
    'uPlot.iife.min.js': { body: uplotAsset('uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
    'uPlot.min.css': { body: uplotAsset('uPlot.min.css'), type: 'text/css; charset=utf-8' },
  };

  async function caller(request: FastifyRequest): Promise<ServiceMeta> {
    const credential = presentedCredential(request.headers, isWellFormedKey);
    if (credential.kind !== 'bearer') {
      throw new HistoryQueryError(
        'UNAUTHORIZED',
        `a live API key is required: Authorization: Bearer <API_KEY>${credential.detail ? ` (${credential.detail})` : ''}`,
        401,
      );
    }
    let lookup: Awaited<ReturnType<KeyResolver['resolve']>>;
    try {
      lookup = await deps.keys.resolve(credential.token);
    } catch (err) {
      if (!(err instanceof KeyUnverifiableError)) throw err;
      throw new HistoryQueryError(
        'KEY_UNVERIFIABLE',
        `the API key could not be verified right now: ${err.message}`,
        503,
      );
    }
    if (lookup.status !== 'active') {
      throw new HistoryQueryError('UNAUTHORIZED', 'the API key is unknown or revoked', 401);
    }
    const { record } = lookup;
    const quota = deps.quota
      ? await deps.quota.peek({ id: record.keyHash, kind: 'key', plan: record.plan }).catch(() => null)
      : null;
    return { auth: { outcome: 'OK', presented: true, tier: record.plan }, quota };
  }

  async function startAfter(position: number, tag: string): Promise<string | null> {
    if (position === 0) return null;
    const [event] = await deps.store.readAll({ after: position - 1, maxCount: 1 });
    if (event?.position !== position || !tagMatches({ position, tag }, event.id)) {
      throw new HistoryQueryError(
        'FOREIGN_CURSOR',
        'after names a position this store does not hold: a cursor from another store?',
      );
    }
    return event.id;
  }

  function fail(reply: FastifyReply, err: unknown) {
    if (err instanceof HistoryQueryError) {
      return reply
        .code(err.status)
        .header('cache-control', 'no-store')
        .send({ code: err.code, message: err.message });
    }
    throw err;
  }

  return async (app) => {
    app.get('/api/verdicts', { config: VERDICTS_DOC }, async (request, reply) => {
      let service: ServiceMeta;
      let progress: ScanProgress;
      let query: ReturnType<typeof parseHistoryQuery>;
      try {
        service = await caller(request);
        query = parseHistoryQuery(request.query as Record<string, unknown>, request.headers.accept);
        const after = query.after ?? { position: 0, tag: '' };
        progress = new ScanProgress(after.position, await startAfter(after.position, after.tag));
      } catch (err) {
        return fail(reply, err);
      }
      const abort = new AbortController();
      // The response closes when it is done or when the client goes away: either way, stop reading.
      reply.raw.on('close', () => abort.abort());
      const scanOptions = {
        filter: query.filter,
        after: progress.position,
        limit: query.limit,
        waitUntil: Date.now() + query.waitMs,
        now: deps.now,
        signal: abort.signal,
        ...(deps.outcomes ? { outcomes: deps.outcomes } : {}),
        ...(deps.stored ? { stored: deps.stored } : {}),
        ...(deps.pageSize ? { pageSize: deps.pageSize } : {}),
      };
      const body = historyStream(
        query.format,
        (make, fromStore) => scanHistory(deps.store, scanOptions, progress, make, fromStore),
        () => ({ cursor: progress.cursor, rows: progress.rows, _service: service }),
        deps.stored !== undefined,
      );
      reply
        .header('content-type', HISTORY_MEDIA_TYPES[query.format])
        .header('cache-control', 'no-store')
        .header('x-service-meta', JSON.stringify(service))
        .trailer('x-history-cursor', async () => progress.cursor);
      if (query.format === 'parquet')
        reply.header('content-disposition', 'attachment; filename="verdicts.parquet"');
      return reply.send(body);
    });

    app.get('/api/track-record', { config: TRACK_RECORD_DOC }, async (request, reply) => {
      try {
        const { window } = parseTrackRecordQuery(request.query as Record<string, unknown>);
        reply.header('cache-control', 'public, max-age=60');
        return trackRecord(deps.trackRecord.state, window, deps.now());
      } catch (err) {
        return fail(reply, err);
      }
    });

    app.get('/track-record', { config: PAGE_DOC }, async (_request, reply) =>
      reply
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'public, max-age=300')
        .send(trackRecordPage()),
    );

    app.get('/track-record/assets/:file', { config: ASSET_DOC }, async (request, reply) => {
      const asset = assets[(request.params as { file: string }).file as keyof typeof assets];
      if (!asset) return reply.code(404).send({ code: 'NOT_FOUND', message: 'no such asset' });
      return reply
        .header('content-type', asset.type)
        .header('cache-control', 'public, max-age=86400')
        .send(asset.body);
    });
  };
}
