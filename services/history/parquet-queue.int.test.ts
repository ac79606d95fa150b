import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { appendSyntheticHistory, startHistoryServer } from '../../test/history-harness.ts';
import { sharedParquetEncoders } from './parquet-encoders.ts';
import { MAX_EXPORTS_PER_KEY, MAX_PARQUET_WAITING } from './routes.ts';

// Enough rows that an export a client stops reading keeps its worker (loopback buffers hold a few MB).
const MARKETS = 20;
const PER_MARKET = 500;

const store = new MemoryEventStore();
let server: Awaited<ReturnType<typeof startHistoryServer>>;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: MARKETS, perMarket: PER_MARKET, idPrefix: 'parquet-queue' });
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

it(`a Parquet export while ${MAX_PARQUET_WAITING} wait for an encoder is refused 503 with Retry-After before any byte; NDJSON is served`, async () => {
  const encoders = sharedParquetEncoders();
  const workers = encoders.capacity;
  const aborting = new AbortController();
  const pending: Promise<unknown>[] = [];
  const start = (key: string, query: string) => {
    const answer = verdicts(key, query, aborting.signal);
    answer.catch(() => undefined);
    pending.push(answer);
  };
  const until = async (done: () => boolean) => {
    while (!done()) await new Promise((resolve) => setTimeout(resolve, 20));
  };
  // The end of the history: a long poll from there waits for new rows on its worker.
  const [reader] = await keysFor(1);
  const whole = (await (await verdicts(reader!, '?trailer=true')).body.text()).trim().split('\n');
  const { cursor } = JSON.parse(whole.at(-1)!) as { cursor: string };
  try {
    // Every worker held: Parquet long polls (the key's own places, no exports) with no new rows
    // to give yet, each on a worker with no byte out.
    const [holder] = await keysFor(1);
    for (let held = 1; held <= workers; held++) {
      start(holder!, `?format=parquet&wait=30&after=${encodeURIComponent(cursor)}`);
      await until(() => encoders.workers === held);
    }
    // As many waiting for a worker as the bound, from as many keys as that takes.
    for (const key of await keysFor(MAX_PARQUET_WAITING)) {
      for (let i = 0; i < MAX_EXPORTS_PER_KEY; i++) start(key, '?format=parquet');
    }
    await until(() => encoders.queued === MAX_PARQUET_WAITING);
    // One more, of a key with no export of its own: refused at once. Before, it waited behind
    // every one of them, however many keys had queued.
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
  } finally {
    aborting.abort();
    await Promise.allSettled(pending);
  }
  await until(() => encoders.queued === 0);
});
