import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import {
  TRACK_RECORD_WINDOWS,
  type TrackRecordResponse,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { scoredPoint } from '../../test/scored-point.ts';
import { escapeJson } from '../api/mcp/answer-json.ts';
import { readResource } from '../api/mcp/resources.ts';
import { signalToolTable, toolRegistry } from '../api/mcp/tool-registry.ts';
import { answerBytesWithService, answerJsonWithService } from '../api/served-answers.ts';
import { keptRevision } from '../engine/answer-revisions.ts';
import { trackRecordProjection } from './projections.ts';
import { BriefCache, RecordCache } from './record-cache.ts';
import { historyRoutes, TRACK_RECORD_ROUTE } from './routes.ts';
import {
  currentTrackRecord,
  type ScoredPoint,
  type TrackRecordState,
  trackRecordBrief,
} from './track-record.ts';
import { trackRecordForAgents } from './track-record-tool.ts';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const T0 = Date.parse('2025-10-01T00:00:00Z');
const DAYS = 30;
const NOW = T0 + (DAYS + 5) * DAY;
const MARKETS: [Exchange, Timeframe][] = [
  ['BINANCE_SPOT', '5m'],
  ['BINANCE', '4h'],
];

/** The track-record projection running on a store of its own (stopped when the test ends). */
async function running() {
  const store = new MemoryEventStore();
  const runner = new ProjectionRunner<TrackRecordState>(
    store,
    new MemoryProjectionStore(),
    trackRecordProjection,
  );
  await runner.start();
  onTestFinished(() => runner.stop());
  /** Appends the outcomes of `points` and waits until the runner has folded them. */
  const fold = async (...points: ScoredPoint[]) => {
    await store.append(
      `verdict-outcome-${randomUUID()}`,
      points.map((p) =>
        newEvent('VerdictOutcomeResolved', {
          ...p,
          coin: 'BTC',
          verdictId: randomUUID(),
          verdictStream: 'verdicts-BINANCE-BTC-1h',
          verdictRevision: 0,
          verdictHash: 'a'.repeat(64),
          feeBps: 10,
          horizonCandles: 6,
          maeBps: 0,
          mfeBps: 0,
          realisedVol: 0.1,
        }),
      ),
    );
    await runner.waitFor(await store.headPosition());
  };
  return { store, runner, fold };
}

/** A running track record of DAYS days of four scored points a day on each market: enough blocks for the risk intervals. */
async function record() {
  const started = await running();
  const points: ScoredPoint[] = [];
  for (let d = 0; d < DAYS; d++)
    for (const [exchange, timeframe] of MARKETS)
      for (let k = 0; k < 4; k++)
        points.push(scoredPoint(exchange, timeframe, T0 + d * DAY + k * 6 * HOUR, points.length + 1));
  await started.fold(...points);
  return { ...started, cache: new RecordCache(started.runner) };
}

describe('RecordCache', () => {
  it('answers byte for byte what the record made fresh answers, for every window', async () => {
    const { runner, cache } = await record();
    for (const window of TRACK_RECORD_WINDOWS) {
      const fresh = currentTrackRecord(runner.state, window, NOW);
      expect(JSON.stringify(cache.current(window, NOW))).toBe(JSON.stringify(fresh));
      expect(JSON.stringify(cache.current(window, NOW))).toBe(JSON.stringify(fresh));
    }
    // The intervals (the resampling the cache saves) are in what was compared.
    expect(
      cache.current('all', NOW).lines.find((l) => l.timeframe === '5m')!.risk.sigmaRatioInterval,
    ).not.toBeNull();
  });

  it('hands out the same answer until an outcome is folded, then the new record', async () => {
    const { runner, fold, cache } = await record();
    const first = cache.current('30d', NOW);
    expect(cache.current('30d', NOW)).toBe(first);
    expect(cache.currentJson('30d', NOW).toString()).toBe(JSON.stringify(first));
    // A later clock past the latest due outcome: the same asOf, the same record.
    expect(cache.current('30d', NOW + DAY)).toBe(first);
    expect(Object.isFrozen(first.lines[0]!.risk)).toBe(true);

    await fold(scoredPoint('BINANCE', '4h', T0 + (DAYS - 1) * DAY, 1));
    const second = cache.current('30d', NOW);
    expect(second).not.toBe(first);
    expect(second.asOfPosition).toBeGreaterThan(first.asOfPosition);
    expect(JSON.stringify(second)).toBe(JSON.stringify(currentTrackRecord(runner.state, '30d', NOW)));
    expect(JSON.stringify(second)).not.toBe(JSON.stringify(first));
    expect(cache.current('30d', NOW)).toBe(second);
    expect(cache.currentJson('30d', NOW).toString()).toBe(JSON.stringify(second));

    // A looped lap's outcome moves only the position (no figure, nor asOf): a new answer still.
    await fold({ ...scoredPoint('BINANCE', '4h', T0, 2), replayLap: 1 });
    const third = cache.current('30d', NOW);
    expect(third).not.toBe(second);
    expect(JSON.stringify(third)).toBe(JSON.stringify(currentTrackRecord(runner.state, '30d', NOW)));
  });

  it('follows asOf: a clock before the latest due outcome is the record as of that clock', async () => {
    const { runner, cache } = await record();
    const early = T0 + 10 * DAY;
    expect(JSON.stringify(cache.current('7d', early))).toBe(
      JSON.stringify(currentTrackRecord(runner.state, '7d', early)),
    );
    expect(JSON.stringify(cache.current('7d', NOW))).toBe(
      JSON.stringify(currentTrackRecord(runner.state, '7d', NOW)),
    );
    expect(cache.current('7d', NOW).asOf).not.toBe(cache.current('7d', early).asOf);
  });
});

/** Every ask get_track_record takes: none, a venue, a timeframe, both (with and without a line). */
const ASKS: { exchange?: Exchange; timeframe?: Timeframe }[] = [
  {},
  { exchange: 'BINANCE_SPOT' },
  { timeframe: '4h' },
  { exchange: 'BINANCE', timeframe: '4h' },
  { exchange: 'BINANCE', timeframe: '5m' },
];

/** A `_service` block as the channels add one, different on every call. */
let calls = 0;
const service = () => ({ auth: { tier: 'free' }, quota: { remaining: ++calls } });

/**
 * get_track_record's answer through the channels' JSON (services/api/served-answers.ts: MCP's
 * structuredContent and text, the keyed HTTP body) is what serialising it afresh gives, byte for
 * byte, its escape included (the text content inside the JSON-RPC answer).
 */
function expectServedAsFresh(answer: TrackRecordResponse, fresh: TrackRecordResponse, label: string) {
  expect(JSON.stringify(answer), label).toBe(JSON.stringify(fresh));
  for (let i = 0; i < 2; i++) {
    const block = service();
    const expected = JSON.stringify({ ...fresh, _service: block });
    const made = answerJsonWithService('get_track_record', answer as never, block);
    expect(made.json, label).toBe(expected);
    expect(made.escaped ?? escapeJson(made.json), label).toBe(escapeJson(expected));
    // The answer's own fields as one kept start (its UTF-8 made once), the call's `_service` after it.
    const split = made.split!;
    expect(split, label).toBeDefined();
    expect(Buffer.concat([split.head, Buffer.from(split.tail)]).toString(), label).toBe(expected);
    expect(Buffer.concat([split.escapedHead, Buffer.from(split.escapedTail)]).toString(), label).toBe(
      escapeJson(expected),
    );
    const bytes = answerBytesWithService('get_track_record', answer as never, block);
    expect(bytes.equals(Buffer.from(expected)), label).toBe(true);
  }
}

describe('RecordCache.forAgents (get_track_record)', () => {
  it('answers what the record made fresh and narrowed answers, byte for byte as served, for every window and ask', async () => {
    const { runner, cache } = await record();
    for (const window of TRACK_RECORD_WINDOWS) {
      for (const ask of ASKS) {
        const label = `${window} ${JSON.stringify(ask)}`;
        const fresh = trackRecordForAgents(currentTrackRecord(runner.state, window, NOW), ask);
        const answer = cache.forAgents(window, NOW, ask);
        // Handed out again as the same object, named as a kept answer: the channels reuse its JSON.
        expect(cache.forAgents(window, NOW, ask), label).toBe(answer);
        expect(keptRevision(answer), label).toBeDefined();
        expect(Object.isFrozen(answer.lines), label).toBe(true);
        expectServedAsFresh(answer, fresh, label);
      }
    }
    // Asks apart are answers apart, each under a name of its own.
    const names = ASKS.map((ask) => keptRevision(cache.forAgents('all', NOW, ask)));
    expect(new Set(names).size).toBe(ASKS.length);
    expect(keptRevision(cache.forAgents('7d', NOW, {}))).not.toBe(
      keptRevision(cache.forAgents('all', NOW, {})),
    );
  });

  it('gives the track-record:// resources the text of the answer made fresh, for every window', async () => {
    const { runner, fold, cache } = await record();
    // get_track_record as the service registers it, its operation the slice's (slice.ts).
    const table = signalToolTable().find((t) => t.name === 'get_track_record')!;
    const registry = toolRegistry([
      {
        ...table,
        run: async (args) => {
          const ask = args as { window: TrackRecordWindow; exchange?: Exchange; timeframe?: Timeframe };
          return cache.forAgents(ask.window, NOW, ask) as never;
        },
      },
    ]);
    const read = async (window: string) =>
      (await readResource(registry, { uri: `track-record://${window}` })).contents[0]!.text;
    for (let round = 0; round < 2; round++) {
      for (const window of TRACK_RECORD_WINDOWS) {
        const fresh = JSON.stringify(trackRecordForAgents(currentTrackRecord(runner.state, window, NOW), {}));
        expect(await read(window), window).toBe(fresh);
        expect(await read(window), window).toBe(fresh);
      }
      // The record moves: each read is of the new answer.
      await fold(scoredPoint('BINANCE', '4h', T0 + (DAYS - 1) * DAY, 1));
    }
  });

  it('hands out the new record once an outcome is folded, served as its own JSON, not the last one kept', async () => {
    const { runner, fold, cache } = await record();
    const before = TRACK_RECORD_WINDOWS.map((window) => cache.forAgents(window, NOW, {}));
    // Served once each: the channels' JSON cache holds these answers under their names.
    for (const answer of before) answerJsonWithService('get_track_record', answer as never, service());
    await fold(scoredPoint('BINANCE', '4h', T0 + (DAYS - 1) * DAY, 1));
    for (const [i, window] of TRACK_RECORD_WINDOWS.entries()) {
      const answer = cache.forAgents(window, NOW, {});
      expect(answer).not.toBe(before[i]);
      expect(answer.asOfPosition).toBeGreaterThan(before[i]!.asOfPosition);
      // The same name as the answer it follows: what is kept under it is replaced, never reused stale.
      expect(keptRevision(answer)).toBe(keptRevision(before[i]!));
      expectServedAsFresh(
        answer,
        trackRecordForAgents(currentTrackRecord(runner.state, window, NOW), {}),
        window,
      );
    }
    expect(JSON.stringify(cache.forAgents('30d', NOW, {}))).not.toBe(JSON.stringify(before[1]));
  });
});

describe('GET /api/track-record', () => {
  it('sends a cached answer as the bytes Fastify sends for the answer made fresh, for every window', async () => {
    const { runner, cache } = await record();
    const app = Fastify({ logger: false });
    // As the service's app does (services/api/app.ts): route schemas are zod contracts.
    app.setValidatorCompiler(validatorCompiler);
    await app.register(
      historyRoutes({
        store: new MemoryEventStore(),
        records: cache,
        now: () => NOW,
        logger: pino({ level: 'silent' }),
      }),
    );
    // The answer made fresh and returned as an object, on the route's own options (its schemas
    // and documented answer): what Fastify serialises for it is what a client receives.
    await app.register(async (scope) => {
      scope
        .withTypeProvider<ZodTypeProvider>()
        .get('/fresh', TRACK_RECORD_ROUTE, async (request) =>
          currentTrackRecord(runner.state, request.query.window, NOW),
        );
    });
    onTestFinished(() => app.close());
    for (const query of ['', ...TRACK_RECORD_WINDOWS.map((w) => `?window=${w}`)]) {
      const fresh = await app.inject(`/fresh${query}`);
      expect(fresh.statusCode).toBe(200);
      // Made for the first request (but '?window=all', made for ''), handed out again for the second.
      for (let i = 0; i < 2; i++) {
        const served = await app.inject(`/api/track-record${query}`);
        expect(served.statusCode, query).toBe(200);
        expect(served.headers['content-type'], query).toBe(fresh.headers['content-type']);
        expect(served.headers['content-length'], query).toBe(fresh.headers['content-length']);
        expect(served.body, query).toBe(fresh.body);
        expect(served.rawPayload.equals(fresh.rawPayload), query).toBe(true);
      }
    }
    expect(cache.currentJson('30d', NOW)).toBe(cache.currentJson('30d', NOW));
  });
});

describe('RecordCache with no outcome counted', () => {
  it('answers as of each `now` asked, never one answer made at another', async () => {
    const { fold, runner } = await running();
    const cache = new RecordCache(runner);
    const [t1, t2] = [T0 + 10 * DAY, T0 + 10 * DAY + 1];
    const empty = async () => {
      for (const window of TRACK_RECORD_WINDOWS) {
        const first = cache.currentJson(window, t1).toString();
        expect(first).toBe(JSON.stringify(currentTrackRecord(runner.state, window, t1)));
        // asOf is `now` when no outcome counts (recordAsOf): the answer at t2 is t2's.
        const second = cache.current(window, t2);
        expect(second.asOf).toBe(new Date(t2).toISOString());
        expect(cache.currentJson(window, t2).toString()).toBe(
          JSON.stringify(currentTrackRecord(runner.state, window, t2)),
        );
        expect(cache.currentJson(window, t2).toString()).not.toBe(first);
        // And back at t1, t1's again.
        expect(cache.current(window, t1).asOf).toBe(new Date(t1).toISOString());
      }
    };
    // Nothing folded: an empty state.
    await empty();
    // A looped lap's outcome only: the state holds it (its position is the answer's), no figure counts it.
    await fold({ ...scoredPoint('BINANCE', '4h', T0, 1), replayLap: 1 });
    expect(cache.current('all', t1).asOfPosition).toBeGreaterThan(0);
    expect(cache.current('all', t1).overall.calls + cache.current('all', t1).overall.holds).toBe(0);
    await empty();
  });
});

const CALL = { exchange: 'BINANCE', timeframe: '1h', confidence: 47 } as const;

/** A BUY on CALL's market at T0 that resolved as `result`. */
const outcome = (result: 'hit' | 'miss', confidence = 45): ScoredPoint => ({
  ...scoredPoint('BINANCE', '1h', T0, 1),
  call: 'BUY',
  confidence,
  result,
});

/** A running track record that has folded one hit, and a cache on it. */
async function withOneHit() {
  const started = await running();
  await started.fold(outcome('hit'));
  return { ...started, cache: new BriefCache(started.runner) };
}

describe('BriefCache', () => {
  it('hands out one line per market and bucket until an outcome resolves, then the new line', async () => {
    const { store, runner, fold, cache } = await withOneHit();
    const first = cache.brief(CALL, T0 + HOUR);
    expect(first).toEqual(trackRecordBrief(runner.state, CALL, T0 + HOUR));
    expect(first).toMatchObject({ calls: 1, hits: 1, confidenceBucket: '40-49' });
    // Same market and bucket: the very same line, and it cannot be changed by whoever holds it.
    expect(cache.brief({ ...CALL, confidence: 41 }, T0 + 2 * HOUR)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    // Another bucket has a line of its own.
    expect(cache.brief({ ...CALL, confidence: 55 }, T0 + HOUR)).toMatchObject({ calls: 0 });

    // Events the track record does not fold leave the lines as they are.
    const revision = runner.revision;
    await store.append('quota-x', [
      newEvent('QuotaDebitsRecorded', {
        subject: 'x',
        subjectKind: 'key',
        plan: 'pro',
        tool: 'get_trade_call',
        units: 1,
        day: '2025-10-01',
        month: '2025-10',
        generation: 'g',
      }),
    ]);
    await runner.waitFor(await store.headPosition());
    expect(runner.revision).toBe(revision);
    expect(cache.brief(CALL, T0 + HOUR)).toBe(first);

    // An outcome resolves: the next call gets a line that counts it.
    await fold(outcome('miss', 48));
    expect(runner.revision).toBeGreaterThan(revision);
    const second = cache.brief(CALL, T0 + HOUR);
    expect(second).not.toBe(first);
    expect(second).toMatchObject({ calls: 2, hits: 1, hitRate: 0.5 });
    expect(second).toEqual(trackRecordBrief(runner.state, CALL, T0 + HOUR));
  });

  it('computes the line afresh on another UTC day (the window starts a day later)', async () => {
    const { runner, cache } = await withOneHit();
    expect(cache.brief(CALL, T0 + HOUR)).toMatchObject({ calls: 1 });
    // 90 days on, the outcome has left the window though the state has not moved.
    const later = T0 + 90 * DAY;
    expect(cache.brief(CALL, later)).toMatchObject({ calls: 0 });
    expect(cache.brief(CALL, later)).toEqual(trackRecordBrief(runner.state, CALL, later));
  });
});
