import type { Readable } from 'node:stream';
import { parquetMetadata } from 'hyparquet';
import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { appendSyntheticHistory, countWaitingLooks, startHistoryServer } from '../../test/history-harness.ts';
import { sharedParquetEncoders } from './parquet-encoders.ts';
import { MAX_EXPORTS_PER_KEY, MAX_PARQUET_WAITING } from './routes.ts';
import { HISTORY_PARQUET_SETTINGS } from './writers.ts';

const MARKETS = 20;
const PER_MARKET = 1_500;

const store = new MemoryEventStore();
/** The history's last position (keys issued later append after it). */
let end = 0;
/** Reads past the history that a scan begins with (its first page) and that found nothing. */
const looksAtEnd = countWaitingLooks(store, () => end);
let server: Awaited<ReturnType<typeof startHistoryServer>>;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: MARKETS, perMarket: PER_MARKET, idPrefix: 'parquet-queue' });
  end = await store.headPosition();
  server = await startHistoryServer({ store, feed: null });
});
afterAll(async () => {
  await server?.close();
});

const verdicts = (key: string, query: string, signal?: AbortSignal) =>
  request(`${server.url}/api/verdicts${query}`, {
    headers: { authorization: `Bearer ${key}` },
    ...(signal ? { signal } : {}),
  });

/** Keys enough for `exports` exports at once (each key streams MAX_EXPORTS_PER_KEY). */
async function keysFor(exports: number): Promise<string[]> {
  const keys: string[] = [];
  for (let i = 0; i < Math.ceil(exports / MAX_EXPORTS_PER_KEY); i++) keys.push(await server.issue());
  return keys;
}

const until = async (done: () => boolean) => {
  while (!done()) await new Promise((resolve) => setTimeout(resolve, 20));
};

/** The cursor after the history's last row. */
async function endCursor(key: string): Promise<string> {
  const lines = (await (await verdicts(key, '?trailer=true')).body.text()).trim().split('\n');
  return (JSON.parse(lines.at(-1)!) as { cursor: string }).cursor;
}

/**
 * A Parquet file on the process's real encoder pool whose rows never come: it holds its worker until
 * destroyed, however large the host's socket buffers are.
 */
function heldEncoder(encoders: ReturnType<typeof sharedParquetEncoders>): Readable {
  const held = encoders.encode(
    HISTORY_PARQUET_SETTINGS,
    () => new Promise<never>(() => {}),
    async () => {},
  );
  expect(held).not.toBeNull();
  return held!;
}

it(`a Parquet export while ${MAX_PARQUET_WAITING} wait for an encoder is refused 503 with Retry-After before any byte; NDJSON is served`, async () => {
  const encoders = sharedParquetEncoders();
  const workers = encoders.capacity;
  const aborting = new AbortController();
  const pending: Promise<unknown>[] = [];
  const held: Readable[] = [];
  const start = (key: string, query: string) => {
    const answer = verdicts(key, query, aborting.signal);
    answer.catch(() => undefined);
    pending.push(answer);
  };
  try {
    // Every worker held by a file whose rows never come (nothing here depends on how long the
    // setup took, nor on how much a connection buffers).
    for (let i = 0; i < workers; i++) held.push(heldEncoder(encoders));
    expect(encoders.workers).toBe(workers);
    // As many waiting for a worker as the bound, from as many keys as that takes.
    for (const key of await keysFor(MAX_PARQUET_WAITING)) {
      for (let i = 0; i < MAX_EXPORTS_PER_KEY; i++) start(key, '?format=parquet');
    }
    await until(() => encoders.queued === MAX_PARQUET_WAITING);
    // One more, of a key with no export of its own: refused at once. Before 77d0390 it waited
    // behind every one of them, however many keys had queued.
    const [late] = await keysFor(1);
    const refused = await verdicts(late!, '?format=parquet');
    const body = (await refused.body.json()) as { code: string; message: string; retryable: boolean };
    expect(refused.statusCode, JSON.stringify(body)).toBe(503);
    expect(body).toMatchObject({ code: 'SERVICE_UNAVAILABLE', retryable: true });
    expect(body.message).toMatch(/Parquet exports already wait for an encoder/);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(encoders.queued).toBe(MAX_PARQUET_WAITING);
    // NDJSON takes no encoder: served whole meanwhile.
    const plain = await verdicts(late!, '');
    expect(plain.statusCode).toBe(200);
    expect((await plain.body.text()).trim().split('\n')).toHaveLength(MARKETS * PER_MARKET);
    // Still held: the queue did not move while the refusal and the NDJSON were answered.
    expect(encoders.queued).toBe(MAX_PARQUET_WAITING);
  } finally {
    for (const file of held) file.destroy();
    aborting.abort();
    await Promise.allSettled(pending);
  }
  await until(() => encoders.queued === 0);
});

it("two Parquet long polls of one key waiting for rows take no encoder: another key's Parquet export is encoded meanwhile", async () => {
  const encoders = sharedParquetEncoders();
  const [waiter, other] = await keysFor(2 * MAX_EXPORTS_PER_KEY);
  const cursor = await endCursor(waiter!);
  looksAtEnd.count = 0;
  // As many long polls as the process has workers, from the end of the history (the key's own
  // long-poll places): each waits for a new row.
  const polls = Array.from({ length: encoders.capacity }, () => {
    const poll = {
      answered: false,
      answer: verdicts(waiter!, `?format=parquet&wait=30&after=${encodeURIComponent(cursor)}`),
    };
    poll.answer.then(
      () => {
        poll.answered = true;
      },
      () => {
        poll.answered = true;
      },
    );
    return poll;
  });
  // Each has read the log's end and found nothing: it is waiting (before, each on a worker).
  await until(() => looksAtEnd.count >= polls.length);
  expect(looksAtEnd.count).toBe(polls.length);

  // Another key's Parquet export is encoded and served while both still wait. Before, it queued
  // behind them until their wait ended (30 s) and no row came.
  const exported = await verdicts(other!, '?format=parquet&limit=1000');
  expect(exported.statusCode).toBe(200);
  const file = await exported.body.arrayBuffer();
  expect(Number(parquetMetadata(file).num_rows)).toBe(1000);
  expect(polls.map((p) => p.answered)).toEqual(polls.map(() => false));

  // A new row ends their wait: each is then encoded, with that row.
  await appendSyntheticHistory(store, { markets: 1, perMarket: 1, idPrefix: 'parquet-queue-new' });
  for (const poll of polls) {
    const answer = await poll.answer;
    expect(answer.statusCode).toBe(200);
    expect(Number(parquetMetadata(await answer.body.arrayBuffer()).num_rows)).toBe(1);
  }
});
