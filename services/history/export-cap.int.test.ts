import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { ERRORS } from '../../contracts/errors.ts';
import { appendSyntheticHistory, startHistoryServer } from '../../test/history-harness.ts';
import { MAX_EXPORTS_PER_KEY } from './routes.ts';

// Enough rows that an export a client stops reading stays open (loopback buffers hold a few MB).
const MARKETS = 20;
const PER_MARKET = 500;

const store = new MemoryEventStore();
let server: Awaited<ReturnType<typeof startHistoryServer>>;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: MARKETS, perMarket: PER_MARKET, idPrefix: 'export-cap' });
  server = await startHistoryServer({ store, feed: null });
});
afterAll(async () => {
  await server?.close();
});

const verdicts = (key: string, query = '') =>
  request(`${server.url}/api/verdicts${query}`, { headers: { authorization: `Bearer ${key}` } });

it("a key's exports past its cap are refused 429 TOO_MANY_EXPORTS with Retry-After, while another key's export and its own long poll are served", async () => {
  const busy = await server.issue();
  const other = await server.issue();
  // The key's exports, each open: its first bytes read, the rest left unread.
  const open = [];
  for (let i = 0; i < MAX_EXPORTS_PER_KEY; i++) {
    const res = await verdicts(busy, i % 2 ? '?format=parquet' : '');
    expect(res.statusCode).toBe(200);
    const iterator = (res.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    expect((await iterator.next()).done).toBe(false);
    open.push(res);
  }

  const refused = await verdicts(busy, '?format=csv');
  expect(refused.statusCode).toBe(ERRORS.TOO_MANY_EXPORTS.status);
  expect(refused.headers['retry-after']).toMatch(/^[1-9]\d*$/);
  expect(refused.headers['cache-control']).toBe('no-store');
  const body = (await refused.body.json()) as { code: string; retryable?: boolean; message: string };
  expect(body).toMatchObject({ code: 'TOO_MANY_EXPORTS', retryable: true });
  expect(body.message).toContain(String(MAX_EXPORTS_PER_KEY));

  // Another key is not held up by this one's exports: served whole.
  const served = await verdicts(other, '?trailer=true');
  expect(served.statusCode).toBe(200);
  const lines = (await served.body.text()).trim().split('\n');
  expect(lines).toHaveLength(MARKETS * PER_MARKET + 1);

  // A long poll holding its own place is no export: served.
  const poll = await verdicts(busy, '?wait=1&limit=1');
  expect(poll.statusCode).toBe(200);
  expect((await poll.body.text()).trim().split('\n')).toHaveLength(1);

  for (const res of open) res.body.destroy();
});
