import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent } from '../../contracts/events.ts';
import { startHistoryServer, syntheticMarket, syntheticVerdict } from '../../test/history-harness.ts';

const MARKETS = 20;
const PER_MARKET = 500;
const PAGE = 500;

/** The real store, with its page reads counted: how far the export reads ahead of the client. */
class CountingStore extends MemoryEventStore {
  pages = 0;
  override async readAll(options: { after?: number; maxCount?: number } = {}) {
    this.pages++;
    return super.readAll(options);
  }
}

const store = new CountingStore();
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let key: string;

beforeAll(async () => {
  for (let m = 0; m < MARKETS; m++) {
    const k = syntheticMarket(m);
    const stream = `verdicts-${k.exchange}-${k.coin}-${k.timeframe}`;
    let prev: string | null = null;
    const events = [];
    for (let n = 0; n < PER_MARKET; n++) {
      const data = syntheticVerdict(m, n, PER_MARKET, prev);
      prev = data.hash;
      events.push(newEvent('VerdictRecorded', data, { id: deterministicId('stream-test', stream, n) }));
    }
    await store.append(stream, events);
  }
  server = await startHistoryServer({ store, feed: null, pageSize: PAGE });
  key = await server.issue();
});
afterAll(async () => {
  await server?.close();
});

it('streams with backpressure: a client that stops reading stops the scan, and gets every row when it goes on', async () => {
  const total = MARKETS * PER_MARKET;
  const res = await request(`${server.url}/api/verdicts?trailer=true`, {
    headers: { authorization: `Bearer ${key}` },
  });
  expect(res.statusCode).toBe(200);
  const body = res.body as AsyncIterable<Buffer> & { pause(): void; resume(): void };
  const iterator = body[Symbol.asyncIterator]();
  const first = await iterator.next();
  expect(String(first.value)).toContain('"verdict_id"');
  const pagesAtStart = store.pages;
  // Not a timing assertion: give the server every chance to run ahead while nobody reads.
  await new Promise((r) => setTimeout(r, 1_500));
  const readAhead = store.pages - pagesAtStart;
  const allPages = Math.ceil((total + 1) / PAGE);
  // Socket buffers on loopback hold a few MB; the rest of the log stays unread until asked for.
  expect(readAhead, `read ${readAhead} of ${allPages} pages ahead`).toBeLessThan(allPages / 2);
  let text = String(first.value);
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) text += String(next.value);
  const lines = text.trim().split('\n');
  expect(lines).toHaveLength(total + 1);
  expect(new Set(lines.slice(0, -1).map((l) => JSON.parse(l).verdict_id)).size).toBe(total);
  expect(JSON.parse(lines.at(-1)!).rows).toBe(total);
});
