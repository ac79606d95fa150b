import { parquetReadObjects } from 'hyparquet';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newEvent } from '../../contracts/events.ts';
import {
  HISTORY_COLUMNS,
  type HistoryRow,
  HistoryTrailer,
  TrackRecordResponse,
} from '../../contracts/history.ts';
import { TIMEFRAME_MS } from '../../contracts/market.ts';
import { TradeCall } from '../../contracts/tools.ts';
import { HOUR, recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { describeFailure, type OperationFailure } from '../engine/operation-errors.ts';
import { scoreRows, verifyRows } from './audit.ts';
import { parseCsvLine } from './files.ts';
import { HistoryQuerySchema } from './query.ts';

type Server = Awaited<ReturnType<typeof startHistoryServer>>;
type Fixture = Awaited<ReturnType<typeof recordHistory>>;

let fx: Fixture;
let server: Server;
let key: string;

beforeAll(async () => {
  // 40 hourly verdicts on three markets; outcomes resolve for the first ~16 steps, the last 5
  // steps stay younger than their reveal time (commitments only: 5 steps x 3 markets).
  fx = await recordHistory({ steps: 40 });
  server = await startHistoryServer({ store: fx.store, feed: fx.feed, pageSize: 16 });
  await server.settle();
  key = await server.issue();
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
});

const auth = () => ({ authorization: `Bearer ${key}` });

/** NDJSON with its trailer line (asked for: by default every line is a row). */
async function ndjson(query: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/api/verdicts${query}${query ? '&' : '?'}trailer=true`, {
    headers: { ...auth(), ...headers },
  });
  expect(res.status).toBe(200);
  const lines = (await res.text()).trim().split('\n');
  const trailer = HistoryTrailer.parse(JSON.parse(lines.at(-1)!));
  return { rows: lines.slice(0, -1).map((l) => JSON.parse(l) as HistoryRow), trailer, res };
}

function csvRows(text: string): Record<string, string>[] {
  const [header, ...lines] = text.trim().split('\n');
  const names = parseCsvLine(header!);
  return lines.map((l) => Object.fromEntries(parseCsvLine(l).map((v, i) => [names[i], v])));
}

async function parquetRows(
  query: string,
  headers: Record<string, string> = { accept: 'application/vnd.apache.parquet' },
) {
  const res = await fetch(`${server.url}/api/verdicts${query}`, { headers: { ...auth(), ...headers } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('application/vnd.apache.parquet');
  const buf = Buffer.from(await res.arrayBuffer());
  // An independent reader (hyparquet, pure JS) over what the Rust writer produced.
  return parquetReadObjects({
    file: buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer,
  });
}

describe('GET /api/verdicts', () => {
  it('streams every verdict as NDJSON with labels, chain fields and a cursor line', async () => {
    const { rows, trailer, res } = await ndjson('');
    expect(res.headers.get('content-type')).toBe('application/x-ndjson');
    expect(JSON.parse(res.headers.get('x-service-meta')!).auth).toEqual({
      outcome: 'OK',
      presented: true,
      tier: 'pro',
    });
    expect(rows).toHaveLength(120);
    expect(trailer.rows).toBe(120);
    expect((trailer._service as { auth: { tier: string } }).auth.tier).toBe('pro');
    const positions = rows.map((r) => r.position);
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
    const labelled = rows.filter((r) => r.result !== null);
    expect(labelled.length).toBeGreaterThan(30);
    for (const r of labelled) {
      expect(r.revealed).toBe(true);
      expect(r.return_1).not.toBeNull();
      expect(r.return_24).not.toBeNull();
      expect(r.realised_vol).toBeGreaterThan(0);
      if (r.call === 'HOLD') expect(r.result).toBe('no-call');
      else
        expect(r.result).toBe(
          r.call === 'BUY' ? (r.return_6! > 0.001 ? 'hit' : 'miss') : -r.return_6! > 0.001 ? 'hit' : 'miss',
        );
    }
    // The 1h markets' last five verdicts are younger than six candles; a 5m verdict is
    // revealed half an hour after its close, before the next hourly step.
    expect(rows.filter((r) => !r.revealed)).toHaveLength(10);
    // Every chain checks end to end from the export alone.
    const report = await verifyRows(
      (async function* () {
        yield* rows;
      })(),
    );
    expect(report).toMatchObject({
      ok: true,
      rows: 120,
      streams: 3,
      streamsStartingMidChain: 0,
      firstBroken: null,
    });
    expect(report.rehashed).toBe(110);
  });

  it('answers CSV and Parquet with the same rows as NDJSON', async () => {
    const { rows } = await ndjson('');
    const csv = await fetch(`${server.url}/api/verdicts?format=csv`, { headers: auth() });
    expect(csv.headers.get('content-type')).toBe('text/csv');
    const text = await csv.text();
    expect(text.split('\n')[0]).toBe(HISTORY_COLUMNS.join(','));
    const fromCsv = csvRows(text);
    expect(fromCsv).toHaveLength(rows.length);
    expect(fromCsv.map((r) => r.hash)).toEqual(rows.map((r) => r.hash));
    expect(fromCsv.map((r) => r.inputs_json || null)).toEqual(rows.map((r) => r.inputs_json));

    const fromParquet = await parquetRows('');
    expect(fromParquet).toHaveLength(rows.length);
    fromParquet.forEach((p, i) => {
      const r = rows[i]!;
      expect(Number(p.position)).toBe(r.position);
      expect(p.hash).toBe(r.hash);
      expect(p.call ?? null).toBe(r.call);
      expect(p.return_6 ?? null).toBe(r.return_6);
      expect(p.net_centi_bps === null || p.net_centi_bps === undefined ? null : Number(p.net_centi_bps)).toBe(
        r.net_centi_bps,
      );
      expect(p.inputs_json ?? null).toBe(r.inputs_json);
      expect(p.lean ?? null).toBe(r.lean);
      expect(
        p.lean_net_centi_bps === null || p.lean_net_centi_bps === undefined
          ? null
          : Number(p.lean_net_centi_bps),
      ).toBe(r.lean_net_centi_bps);
      // Times are Parquet TIMESTAMPs: hyparquet gives Dates, the same instants as the row's.
      expect(p.recorded_at).toBeInstanceOf(Date);
      expect((p.recorded_at as Date).toISOString()).toBe(r.recorded_at);
      expect((p.reveal_at as Date).toISOString()).toBe(r.reveal_at);
      expect(
        p.candle_close_time === null || p.candle_close_time === undefined
          ? null
          : (p.candle_close_time as Date).getTime(),
      ).toBe(r.candle_close_time);
      expect(p.cursor).toBe(r.cursor);
    });
    expect(fromCsv.map((r) => r.lean || null)).toEqual(rows.map((r) => r.lean));
    expect(fromCsv.map((r) => (r.lean_net_centi_bps ? Number(r.lean_net_centi_bps) : null))).toEqual(
      rows.map((r) => r.lean_net_centi_bps),
    );
  });

  it("carries each resolved verdict's lean and what following it earned after the fee", async () => {
    const { rows } = await ndjson('');
    const labelled = rows.filter((r) => r.result !== null);
    const holds = labelled.filter((r) => r.call === 'HOLD');
    // The perp 1h markets answer HOLD; their leans are what an analyst recomputes the claim from.
    expect(holds.length).toBeGreaterThan(20);
    expect(holds.filter((r) => r.lean !== null).length).toBeGreaterThan(20);
    for (const r of labelled) {
      if (r.lean === null) {
        expect(r.lean_net_centi_bps).toBeNull();
        continue;
      }
      // docs/evaluation.md, Method: the return over 6 candles in the lean's direction, less 10 bps.
      const dir = r.lean === 'BUY' ? 1 : -1;
      expect(r.lean_net_centi_bps).toBe(Math.round((dir * r.return_6! * 10_000 - 10) * 100));
      // A call's lean is its own direction, and following it earned what the call did.
      if (r.call !== 'HOLD') {
        expect(r.lean).toBe(r.call);
        expect(r.lean_net_centi_bps).toBe(r.net_centi_bps);
      }
    }
    // Revealed but not yet resolved, or sealed: no lean shown.
    for (const r of rows.filter((x) => x.result === null)) {
      expect(r.lean).toBeNull();
      expect(r.lean_net_centi_bps).toBeNull();
    }
  });

  it('never shows an unrevealed verdict beyond its commitment, in any format or filter', async () => {
    const { rows: all } = await ndjson('');
    const young = all.filter((r) => !r.revealed);
    const youngIds = new Set(young.map((r) => r.verdict_id));
    const target = young[0]!;
    // What the store holds for it: the content the service must not show yet.
    const [stored] = await fx.store.readStream(target.stream, { fromRevision: target.revision, maxCount: 1 });
    const secret = stored!.data as { call: string; confidence: number; score: number };
    const revealAt = Date.parse(target.reveal_at);
    const closeTime = revealAt - 6 * TIMEFRAME_MS[target.timeframe];
    const queries = [
      '',
      '?exchange=BINANCE',
      `?coin=${target.coin}`,
      `?timeframe=${target.timeframe}`,
      '?call=BUY',
      '?call=SELL',
      '?call=HOLD',
      `?call=${secret.call}`,
      `?from=${closeTime}`,
      `?to=${new Date(closeTime).toISOString()}`,
      `?from=${closeTime}&to=${closeTime}`,
      `?exchange=${target.exchange}&coin=${target.coin}&timeframe=${target.timeframe}&call=${secret.call}`,
      `?limit=1&from=${closeTime}`,
    ];
    const contentFields = [
      'call',
      'confidence',
      'score',
      'regime',
      'price',
      'candle_close_time',
      'feed',
      'engine_version',
      'trigger',
      'inputs_json',
      'result',
      'return_6',
      'net_centi_bps',
      'lean',
      'lean_net_centi_bps',
    ] as const;
    for (const q of queries) {
      const { rows } = await ndjson(q);
      const hit = rows.filter((r) => youngIds.has(r.verdict_id));
      expect(hit.length, q).toBeGreaterThan(0);
      for (const r of hit) for (const f of contentFields) expect(r[f], `${q} ${f}`).toBeNull();
      const csv = csvRows(
        await (
          await fetch(`${server.url}/api/verdicts${q}${q ? '&' : '?'}format=csv`, { headers: auth() })
        ).text(),
      );
      const csvHit = csv.filter((r) => youngIds.has(r.verdict_id!));
      expect(csvHit.length, q).toBe(hit.length);
      for (const r of csvHit) {
        expect(r.revealed).toBe('false');
        for (const f of contentFields) expect(r[f], `csv ${q} ${f}`).toBe('');
      }
      const pq = (await parquetRows(q)).filter((r) => youngIds.has(r.verdict_id as string));
      expect(pq.length, q).toBe(hit.length);
      for (const r of pq) {
        expect(r.revealed).toBe(false);
        for (const f of contentFields) expect(r[f] ?? null, `parquet ${q} ${f}`).toBeNull();
      }
    }
    // Nor through the resume cursor: from just before it, it is still a commitment.
    const before = all[all.indexOf(target) - 1]!;
    const page = await ndjson(`?limit=1`);
    expect(page.rows[0]!.verdict_id).toBe(all[0]!.verdict_id);
    let cursor = page.trailer.cursor;
    for (;;) {
      const next = await ndjson(`?limit=50&after=${cursor}`);
      const found = next.rows.find((r) => r.verdict_id === target.verdict_id);
      if (found) {
        expect(found.call).toBeNull();
        expect(found.revealed).toBe(false);
        break;
      }
      expect(next.rows.length).toBeGreaterThan(0);
      cursor = next.trailer.cursor;
    }
    expect(before.position).toBeLessThan(target.position);
  });

  it('applies filters to revealed content', async () => {
    const { rows } = await ndjson('?call=SELL&exchange=BINANCE&coin=eth');
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.exchange).toBe('BINANCE');
      expect(r.coin).toBe('ETH');
      if (r.revealed) expect(r.call).toBe('SELL');
    }
    const from = Date.parse('2025-10-15T10:00:00Z');
    const to = Date.parse('2025-10-15T20:00:00Z');
    const { rows: ranged } = await ndjson(`?from=2025-10-15T10:00:00Z&to=${to}`);
    expect(ranged).toHaveLength(33);
    for (const r of ranged) {
      expect(r.candle_close_time).toBeGreaterThanOrEqual(from);
      expect(r.candle_close_time).toBeLessThanOrEqual(to);
    }
  });

  it('gives every row exactly once across pages, and after a dropped connection', async () => {
    const { rows: all } = await ndjson('');
    const seen: HistoryRow[] = [];
    let cursor: string | null = null;
    let pages = 0;
    for (;;) {
      // Every third page the connection is dropped after a few bytes: the client retries the
      // same cursor, as `history export` does.
      if (pages % 3 === 1) {
        const res = await request(`${server.url}/api/verdicts?limit=7${cursor ? `&after=${cursor}` : ''}`, {
          headers: auth(),
        });
        for await (const _chunk of res.body) break;
        res.body.destroy();
      }
      const page = await ndjson(`?limit=7${cursor ? `&after=${cursor}` : ''}`);
      pages++;
      seen.push(...page.rows);
      cursor = page.trailer.cursor;
      if (page.rows.length < 7) break;
    }
    expect(seen.map((r) => r.verdict_id)).toEqual(all.map((r) => r.verdict_id));
    expect(pages).toBe(Math.floor(120 / 7) + 1);
    // The trailer cursor is also an HTTP trailer.
    const res = await request(`${server.url}/api/verdicts?limit=3&format=csv`, { headers: auth() });
    await res.body.text();
    expect(res.trailers['x-history-cursor']).toBeTruthy();
    const next = await ndjson(`?limit=1&after=${res.trailers['x-history-cursor']}`);
    expect(next.rows[0]!.verdict_id).toBe(all[3]!.verdict_id);
    // A cursor issued before h2 (h1: the first 12 hex digits of the event's id) resumes at the same place.
    const h2 = Buffer.from(String(res.trailers['x-history-cursor']), 'base64url').toString('utf8');
    expect(h2).toMatch(/^h2:\d+:[0-9a-f]{12}$/);
    const position = Number(h2.split(':')[1]);
    const [event] = await fx.store.readAll({ after: position - 1, maxCount: 1 });
    const h1 = Buffer.from(`h1:${position}:${event!.id.replaceAll('-', '').slice(0, 12)}`).toString(
      'base64url',
    );
    expect((await ndjson(`?limit=1&after=${h1}`)).rows[0]!.verdict_id).toBe(all[3]!.verdict_id);
  });

  it('long-polls with wait= until a new verdict is recorded', async () => {
    const { trailer } = await ndjson('');
    // The longest wait: on a busy machine the verdict below may take seconds to be recorded.
    const pending = ndjson(`?wait=30&after=${trailer.cursor}`);
    await new Promise((r) => setTimeout(r, 300));
    fx.feed.clock.advance(HOUR);
    await fx.engine.getTradeCall({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' });
    const { rows } = await pending;
    expect(rows).toHaveLength(1);
    expect(rows[0]!.revealed).toBe(false);
    expect(rows[0]!.call).toBeNull();
    // Nothing new: wait=0 answers at once with no rows and the same place to resume.
    const after = await ndjson(`?after=${trailer.cursor}&limit=5`);
    const empty = await ndjson(`?after=${after.trailer.cursor}`);
    expect(empty.rows).toHaveLength(0);
  });

  it('holds at most 4 long polls of one key waiting: one more answers at once, as wait=0 would', async () => {
    const { trailer } = await ndjson('');
    const end = `after=${trailer.cursor}&trailer=true`;
    const held = Array.from({ length: 4 }, () => new AbortController());
    const waiting = held.map((abort) =>
      fetch(`${server.url}/api/verdicts?wait=30&${end}`, { headers: auth(), signal: abort.signal }).catch(
        () => null,
      ),
    );
    await new Promise((r) => setTimeout(r, 300));
    // The fifth: at once, no rows, the same place to resume. Not a figure: a bound well inside its
    // 30 s wait, which a fifth poll held waiting would run out whole, however slow the machine.
    const started = Date.now();
    const fifth = await ndjson(`?wait=30&after=${trailer.cursor}`);
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(fifth.rows).toHaveLength(0);
    expect(fifth.trailer.cursor).toBe(trailer.cursor);
    // Another key's long poll still waits.
    const other = await server.issue();
    const otherStarted = Date.now();
    const res = await fetch(`${server.url}/api/verdicts?wait=1&${end}`, {
      headers: { authorization: `Bearer ${other}` },
    });
    await res.text();
    expect(Date.now() - otherStarted).toBeGreaterThanOrEqual(900);
    // Closing the held ones frees their places: the key's next long poll waits again.
    for (const abort of held) abort.abort();
    await Promise.all(waiting);
    await new Promise((r) => setTimeout(r, 300));
    const again = Date.now();
    expect((await ndjson(`?wait=1&after=${trailer.cursor}`)).rows).toHaveLength(0);
    expect(Date.now() - again).toBeGreaterThanOrEqual(900);
  });

  it('a stream cut mid-way resumes from its last complete row’s cursor: every row once (NDJSON and CSV)', async () => {
    /** The first `bytes` bytes of an answer as a client had them when its connection dropped. */
    async function cut(query: string, bytes: number): Promise<string> {
      const abort = new AbortController();
      const res = await fetch(`${server.url}/api/verdicts${query}`, {
        headers: auth(),
        signal: abort.signal,
      });
      const reader = res.body!.getReader();
      const chunks: Uint8Array[] = [];
      let got = 0;
      while (got < bytes) {
        const { value, done } = await reader.read();
        if (done) break;
        chunks.push(value);
        got += value.length;
      }
      abort.abort();
      return Buffer.concat(chunks).subarray(0, bytes).toString('utf8');
    }
    const plain = async (query: string) => {
      const res = await fetch(`${server.url}/api/verdicts${query}`, { headers: auth() });
      expect(res.status).toBe(200);
      return res.text();
    };

    for (const filter of ['', 'coin=ETH&']) {
      // NDJSON as served (rows only): the cut falls inside a line, which is left out.
      const full = await plain(`?${filter}format=ndjson`);
      const all = full.trim().split('\n');
      expect(all.length).toBeGreaterThan(10);
      const at = full.indexOf('\n', full.length >> 1) - 40;
      const kept = (await cut(`?${filter}format=ndjson`, at)).split('\n');
      const partial = kept.pop()!;
      expect(partial.length).toBeGreaterThan(0);
      expect(() => JSON.parse(partial)).toThrow();
      const last = JSON.parse(kept.at(-1)!) as HistoryRow;
      const rest = (await plain(`?${filter}format=ndjson&after=${last.cursor}`)).trim().split('\n');
      expect([...kept, ...rest]).toEqual(all);
      const ids = [...kept, ...rest].map((l) => (JSON.parse(l) as HistoryRow).verdict_id);
      expect(new Set(ids).size).toBe(all.length);

      // CSV: the cursor is the last column.
      const csv = await plain(`?${filter}format=csv`);
      const [header, ...rows] = csv.trim().split('\n');
      expect(parseCsvLine(header!).at(-1)).toBe('cursor');
      const csvAt = csv.indexOf('\n', csv.length >> 1) - 30;
      const csvKept = (await cut(`?${filter}format=csv`, csvAt)).split('\n').slice(1, -1);
      const csvCursor = parseCsvLine(csvKept.at(-1)!).at(-1)!;
      const [again, ...csvRest] = (await plain(`?${filter}format=csv&after=${csvCursor}`)).trim().split('\n');
      expect(again).toBe(header);
      expect([...csvKept, ...csvRest]).toEqual(rows);
    }
  });

  it('refuses bad input with {code, message}', async () => {
    const cases: [string, Record<string, string>, number, string][] = [
      ['?colour=red', {}, 400, 'UNKNOWN_FILTER'],
      ['?exchange=NASDAQ', {}, 400, 'INVALID_EXCHANGE'],
      ['?coin=BT-C', {}, 400, 'INVALID_COIN'],
      ['?timeframe=7m', {}, 400, 'INVALID_TIMEFRAME'],
      ['?call=MAYBE', {}, 400, 'INVALID_CALL'],
      ['?from=yesterday', {}, 400, 'INVALID_TIME'],
      ['?to=2025-13-45T00:00:00Z', {}, 400, 'INVALID_TIME'],
      ['?from=2025-10-02T00:00:00Z&to=2025-10-01T00:00:00Z', {}, 400, 'INVALID_TIME'],
      ['?after=not-a-cursor', {}, 400, 'INVALID_CURSOR'],
      [`?after=${Buffer.from('h1:5:0123456789ab').toString('base64url')}`, {}, 400, 'FOREIGN_CURSOR'],
      [`?after=${Buffer.from('h1:99999999:0123456789ab').toString('base64url')}`, {}, 400, 'FOREIGN_CURSOR'],
      [`?after=${Buffer.from('h2:5:0123456789ab').toString('base64url')}`, {}, 400, 'FOREIGN_CURSOR'],
      ['?limit=0', {}, 400, 'INVALID_LIMIT'],
      ['?limit=1000001', {}, 400, 'INVALID_LIMIT'],
      ['?limit=ten', {}, 400, 'INVALID_LIMIT'],
      ['?wait=31', {}, 400, 'INVALID_WAIT'],
      ['?format=xml', {}, 400, 'UNSUPPORTED_FORMAT'],
      ['', { accept: 'application/xml' }, 400, 'UNSUPPORTED_FORMAT'],
      ['?limit=1&limit=2', {}, 400, 'INVALID_PARAMETER'],
      ['?trailer=yes', {}, 400, 'UNSUPPORTED_FORMAT'],
      // The trailer line is NDJSON's: refused of another format rather than left out unsaid.
      ['?trailer=true&format=csv', {}, 400, 'UNSUPPORTED_FORMAT'],
      ['?trailer=true', { accept: 'application/vnd.apache.parquet' }, 400, 'UNSUPPORTED_FORMAT'],
      // So is the trailer profile on the Accept range an answer would be served as.
      ['', { accept: 'text/csv; profile="trailer"' }, 400, 'UNSUPPORTED_FORMAT'],
      ['', { accept: 'application/vnd.apache.parquet;profile=trailer' }, 400, 'UNSUPPORTED_FORMAT'],
      ['', { authorization: '' }, 401, 'UNAUTHORIZED'],
      [
        '',
        { authorization: 'Bearer sk_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' },
        401,
        'UNAUTHORIZED',
      ],
      ['', { authorization: `Token ${key}` }, 401, 'UNAUTHORIZED'],
      // A coin no venue lists is refused as the tools refuse it, not served as an empty history.
      ['?coin=NOPECOIN', {}, 404, 'unknown_coin'],
      ['?coin=nopecoin&exchange=BINANCE_SPOT', {}, 404, 'unknown_coin'],
    ];
    for (const [query, headers, status, code] of cases) {
      const res = await fetch(`${server.url}/api/verdicts${query}`, { headers: { ...auth(), ...headers } });
      expect(res.status, `${query} ${JSON.stringify(headers)}`).toBe(status);
      const body = (await res.json()) as {
        code: string;
        message: string;
        field?: string;
        _service?: unknown;
      };
      expect(body.code, query).toBe(code);
      // A refused cursor says what to pass instead.
      if (code.endsWith('_CURSOR')) expect(body.message, query).toContain('X-History-Cursor trailer');
      // A refused query parameter is named in `field`, as on every route with a query.
      const named = /^\?(\w+)=/.exec(query)?.[1];
      if (status === 400 && named) expect(body.field, query).toBe(named);
      if (code === 'unknown_coin') expect(body.field, query).toBe('coin');
      // A refused Accept header is named too (README: every 400 is {code, message, field}).
      if (status === 400 && !named && headers.accept) expect(body.field, headers.accept).toBe('accept');
      expect(body.message.length).toBeGreaterThan(5);
      // Any response carries the caller's live quota (contract 8), refusals of a key too.
      expect(body._service, `${query} ${JSON.stringify(headers)}`).toMatchObject({
        quota: { remaining: expect.any(Number) },
      });
      // A 401 (a key refused, or a caller served as anonymous) carries tier `free`: no key applied.
      expect(body._service, `${query} ${JSON.stringify(headers)}`).toMatchObject({
        auth: { tier: status === 401 ? 'free' : expect.any(String) },
      });
    }
    // A key is checked before anything else.
    const res = await fetch(`${server.url}/api/verdicts?colour=red`);
    expect(res.status).toBe(401);
    // An unknown parameter is answered with the parameters the route knows.
    const unknown = await fetch(`${server.url}/api/verdicts?colour=red`, { headers: auth() });
    expect(((await unknown.json()) as { message: string }).message).toBe(
      `unknown parameter "colour"; known: ${Object.keys(HistoryQuerySchema.shape).join(', ')}`,
    );
    expect(Object.keys(HistoryQuerySchema.shape)).toContain('exchange');
    // The tools' own words: the coin and the venues asked.
    const nope = await fetch(`${server.url}/api/verdicts?coin=NOPECOIN&exchange=BINANCE_SPOT`, {
      headers: auth(),
    });
    expect(((await nope.json()) as { message: string }).message).toMatch(
      /^NOPECOIN is not listed on BINANCE_SPOT/,
    );
    // A coin the feed lists but the history holds no verdict of: an empty history, not a refusal.
    const listed = await ndjson('?coin=DOGE&exchange=BINANCE_SPOT');
    expect(listed.rows).toEqual([]);
    // A venue or timeframe no market is served on, which the history holds nothing of: refused
    // with the code and words get_trade_call and the scans answer (services/engine unservedVenue).
    const tools = async (run: () => Promise<unknown>) =>
      describeFailure(await run().catch((e: unknown) => e))!;
    const unserved: [string, Promise<OperationFailure>][] = [
      ['?exchange=BYBIT', tools(() => fx.engine.getTradeCall({ coin: 'BTC', exchange: 'BYBIT' }))],
      [
        '?exchange=OKX&timeframe=1m',
        tools(() => fx.engine.getTradeCall({ coin: 'BTC', exchange: 'OKX', timeframe: '1m' })),
      ],
      [
        '?exchange=BINANCE&timeframe=1m',
        tools(() => fx.engine.scanTradeCalls({ exchange: 'BINANCE', timeframe: '1m' })),
      ],
      ['?coin=BTC&exchange=BYBIT', tools(() => fx.engine.getTradeCall({ coin: 'BTC', exchange: 'BYBIT' }))],
    ];
    for (const [query, expected] of unserved) {
      const { code, message, status } = await expected;
      const res = await fetch(`${server.url}/api/verdicts${query}`, { headers: auth() });
      expect(res.status, query).toBe(422);
      expect(status).toBe(422);
      const field = code === 'unsupported_exchange' ? 'exchange' : 'timeframe';
      expect(await res.json(), query).toMatchObject({ code, message, field });
      expect(code, query).toMatch(/^unsupported_(exchange|timeframe)$/);
    }
    // A timeframe alone is asked of every venue: the scans' code, said of every venue (a scan
    // naming none is answered for its default venue, and its words name that one).
    const minute = await fetch(`${server.url}/api/verdicts?timeframe=1m`, { headers: auth() });
    expect(minute.status).toBe(422);
    expect(await minute.json()).toMatchObject({
      code: (await tools(() => fx.engine.scanTradeCalls({ timeframe: '1m' }))).code,
      field: 'timeframe',
      message: expect.stringMatching(
        /^timeframe 1m is not available on any venue here \(.*BINANCE_SPOT.*\): they serve 5m, /,
      ),
    });
    // Served (or held) venues and timeframes still answer, an empty history where nothing is held.
    for (const query of ['?exchange=BINANCE&timeframe=4h', '?timeframe=5m', '?exchange=BINANCE_SPOT']) {
      const res = await fetch(`${server.url}/api/verdicts${query}`, { headers: auth() });
      expect(res.status, query).toBe(200);
      await res.arrayBuffer();
    }
  });
});

describe('GET /api/track-record', () => {
  it('is public and cacheable, and the export file alone reproduces it', async () => {
    for (const window of ['7d', '30d', '90d', 'all'] as const) {
      const res = await fetch(`${server.url}/api/track-record?window=${window}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toBe('public, max-age=60');
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      const body = await res.text();
      // Asked again at the same position: the same bytes (the answer's JSON, kept with it).
      expect(await (await fetch(`${server.url}/api/track-record?window=${window}`)).text()).toBe(body);
      const tr = TrackRecordResponse.parse(JSON.parse(body));
      const { rows } = await ndjson('');
      const rescored = await scoreRows(
        (async function* () {
          yield* rows;
        })(),
        window,
        Date.parse(tr.asOf),
      );
      expect(rescored).toEqual(tr);
      if (window === 'all') {
        expect(tr.overall.calls + tr.overall.holds).toBe(rows.filter((r) => r.result !== null).length);
        expect(tr.lines.map((l) => `${l.exchange} ${l.timeframe}`)).toEqual([
          'BINANCE 1h',
          'BINANCE_SPOT 5m',
        ]);
        expect(tr.overall.following.hitRate).toBeCloseTo(tr.overall.hits / tr.overall.calls, 5);
        expect(tr.series.length).toBeGreaterThan(0);
        // Beside the live figures, the free baselines the evaluation measured out of sample: per
        // cell always-HOLD and the best free rule, per timeframe and horizon the free band.
        const base = tr.baselines!;
        expect(base.cells.map((c) => c.cell)).toContain('spot:5m');
        for (const c of base.cells) {
          expect(c.alwaysHoldNetBps).toBe(0);
          expect(c.serviceNetBpsPerAnswer).toBe(c.emits ? c.wouldBeNetBpsPerCall : 0);
          expect(c.bestFreeRule).toMatch(/^(fade|follow) the last \d+ candles?$/);
        }
        const fiveMinute = base.risk.filter((r) => r.set === 'spot' && r.timeframe === '5m');
        expect(fiveMinute.map((r) => [r.horizon, r.candles])).toEqual([
          ['next', 1],
          ['verdict', 6],
          ['day', 288],
        ]);
        for (const r of fiveMinute) expect(Math.abs(r.coverage.value! - 0.8)).toBeLessThan(0.05);
        // The risk forecast every resolved verdict served (HOLD included), scored on what followed.
        const risk = tr.overall.risk;
        expect(risk.points + risk.unscored).toBe(tr.overall.calls + tr.overall.holds);
        expect(risk.unscored).toBe(0);
        const scored = rows.filter((r) => r.result !== null);
        const covered = scored.filter((r) => {
          const inputs = JSON.parse(r.inputs_json!) as Record<string, number>;
          const close = r.price! * (1 + r.return_6!);
          return close >= inputs.vol_band_low! && close <= inputs.vol_band_high!;
        });
        expect(risk.covered).toBe(covered.length);
        expect(risk.coverage).toBeCloseTo(covered.length / scored.length, 5);
        expect(risk.nominalCoverage).toBe(0.8);
        const rms = (xs: number[]) => Math.sqrt(xs.reduce((a, x) => a + x * x, 0) / xs.length);
        const sigma = rms(
          scored.map(
            (r) => (JSON.parse(r.inputs_json!) as Record<string, number>).vol_expected_move_pct! / 100,
          ),
        );
        const realised = rms(scored.map((r) => Math.log1p(r.return_6!)));
        expect(risk.sigmaRatio).toBeCloseTo(sigma / realised, 4);
        expect(tr.series.at(-1)!.sigmaRatio).toBe(risk.sigmaRatio);
        expect(tr.series.at(-1)!.riskPoints).toBe(risk.points);
        for (const l of tr.lines) expect(l.risk.points).toBeGreaterThan(0);
        // Carry: no record per opportunity, so the shipped model's training fit, saying so.
        expect(tr.carry.recorded).toBe(false);
        expect(tr.carry.note).toContain('not tracked live');
        expect(tr.carry.buckets[0]!.horizons.map((h) => h.hours)).toEqual([8, 24, 72, 168]);
      }
    }
    const bad = await fetch(`${server.url}/api/track-record?window=1y`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { code: string }).code).toBe('INVALID_WINDOW');
    const unknown = await fetch(`${server.url}/api/track-record?exchange=BINANCE`);
    expect(await unknown.json()).toMatchObject({
      code: 'UNKNOWN_FILTER',
      message: 'unknown parameter "exchange"; known: window',
    });
  });

  it('moves as outcomes resolve', async () => {
    const before = TrackRecordResponse.parse(await (await fetch(`${server.url}/api/track-record`)).json());
    fx.feed.clock.advance(3 * HOUR);
    await server.settle();
    const after = TrackRecordResponse.parse(await (await fetch(`${server.url}/api/track-record`)).json());
    expect(after.overall.calls + after.overall.holds).toBeGreaterThan(
      before.overall.calls + before.overall.holds,
    );
  });

  it('labels an outcome once, whoever resolves it', async () => {
    const head = await fx.store.headPosition();
    expect(await server.slice.processors[0]!.resolveDue()).toBe(0);
    expect(await fx.store.headPosition()).toBe(head);
    // A forged outcome for other content is not attached to the verdict it names.
    const { rows } = await ndjson('?limit=1');
    const row = rows[0]!;
    expect(row.outcome_id).not.toBeNull();
    const forged = newEvent('VerdictOutcomeResolved', {
      exchange: row.exchange,
      coin: row.coin,
      timeframe: row.timeframe,
      verdictId: row.verdict_id,
      verdictStream: row.stream,
      verdictRevision: row.revision,
      verdictHash: 'f'.repeat(64),
      call: 'BUY',
      confidence: 99,
      candleCloseTime: row.candle_close_time!,
      feed: 'replay',
      price: 1,
      return1: 0,
      return6: 0,
      return24: 0,
      result: 'miss',
      feeBps: 10,
      horizonCandles: 6,
      netCentiBps: -1000,
      maeBps: 0,
      mfeBps: 0,
      realisedVol: 0,
    });
    await expect(
      fx.store.append(`verdict-outcome-${row.verdict_id}`, [forged], { expectedRevision: 'no_stream' }),
    ).rejects.toThrow();
  });

  it('attaches the track-record line of its exchange, timeframe and bucket to a trade call', async () => {
    const ops = server.slice.withTrackRecord(fx.engine);
    const call = TradeCall.parse(
      await ops.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' }),
    );
    const line = call.trackRecord!;
    expect(line).toMatchObject({ window: '90d', exchange: 'BINANCE', timeframe: '1h' });
    const bucket = Math.min(9, Math.floor(call.confidence / 10));
    expect(line.confidenceBucket.startsWith(`${bucket * 10}-`)).toBe(true);
    const tr = TrackRecordResponse.parse(
      await (await fetch(`${server.url}/api/track-record?window=90d`)).json(),
    );
    const market = tr.lines.find((l) => l.exchange === 'BINANCE' && l.timeframe === '1h')!;
    expect(line.calls).toBe(market.buckets[bucket]!.calls);
    expect(line.hits).toBe(market.buckets[bucket]!.hits);
    expect(line.randomHitRate).toBe(market.random.hitRate);

    // Until the verdict or the line moves, every caller is handed the same joined call; without
    // the reasoning, another one, made once as well.
    const again = await ops.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' });
    const raw = await ops.getTradeCall({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' });
    expect(raw).toBe(again);
    const brief = (input: object) => ops.getTradeCall({ ...input, includeReasoning: false } as never);
    const short = await brief({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' });
    expect(short).not.toHaveProperty('reasoning');
    expect(short.trackRecord).toBe(again.trackRecord);
    expect(await brief({ coin: 'ETH', timeframe: '1h', exchange: 'BINANCE' })).toBe(short);
  });
});

describe('GET /track-record/assets/:file', () => {
  it('serves the two uPlot files and 404s any other name, prototype members included', async () => {
    const js = await fetch(`${server.url}/track-record/assets/uPlot.iife.min.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await js.text()).length).toBeGreaterThan(1000);
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'nope.js']) {
      const res = await fetch(`${server.url}/track-record/assets/${name}`);
      expect(res.status, name).toBe(404);
      expect(res.headers.get('cache-control'), name).not.toContain('max-age=86400');
      expect(await res.json(), name).toMatchObject({ code: 'NOT_FOUND' });
    }
  });
});

// Last: it leaves the key registry stopped.
describe('a key that cannot be checked right now', () => {
  it('→ 503 KEY_UNVERIFIABLE, retryable, with the _service of the address it counts against', async () => {
    await server.registry.stop();
    const res = await fetch(`${server.url}/api/verdicts`, { headers: auth() });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({
      code: 'KEY_UNVERIFIABLE',
      retryable: true,
      _service: {
        auth: { outcome: 'INDETERMINATE', presented: true, tier: 'free', detail: 'retry shortly' },
      },
    });
  });
});
