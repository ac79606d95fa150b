import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { HistoryRow } from '../../contracts/history.ts';
import { appendSyntheticHistory, startHistoryServer } from '../../test/history-harness.ts';
import { ScanProgress, scanHistory } from './scan.ts';
import { parquetStream } from './writers.ts';

const MARKETS = 20;
const PER_MARKET = 500;

/** The real store, with the verdicts its log reads have given counted: how far an export has read. */
class CountingStore extends MemoryEventStore {
  verdictsRead = 0;
  override async readAll(options: { after?: number; maxCount?: number } = {}) {
    const page = await super.readAll(options);
    for (const event of page) if (event.type === 'VerdictRecorded') this.verdictsRead++;
    return page;
  }
}

const store = new CountingStore();
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let key: string;
/**
 * The same routes reached over a Unix-domain socket: its buffers are a fixed ~200 KB
 * (net.core.wmem_default), where loopback TCP grows them to megabytes (tcp_wmem, tcp_rmem: 4 and
 * 32 MB here), enough to take the whole ~12 MB log while the client reads nothing.
 */
let unix: Server;
const socketPath = join(tmpdir(), `history-stream-${randomUUID()}.sock`);

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: MARKETS, perMarket: PER_MARKET, idPrefix: 'stream-test' });
  server = await startHistoryServer({ store, feed: null });
  key = await server.issue();
  // The first keyed request rebuilds the quota counters from the log (a read of all of it):
  // done here, so that what the store reads below is the export's.
  const warm = await request(`${server.url}/api/verdicts?limit=1`, {
    headers: { authorization: `Bearer ${key}` },
  });
  await warm.body.text();
  unix = createServer((socket) => server.app.server.emit('connection', socket));
  await new Promise<void>((resolve) => unix.listen(socketPath, resolve));
});
afterAll(async () => {
  await new Promise((resolve) => unix?.close(resolve));
  rmSync(socketPath, { force: true });
  await server?.close();
});

/** Resolves once `read()` has not moved for `quietMs` (at most `capMs`): the server has stopped, or never will. */
async function settled(read: () => number, quietMs = 500, capMs = 10_000): Promise<number> {
  let last = read();
  let quietSince = Date.now();
  const started = Date.now();
  while (Date.now() - quietSince < quietMs && Date.now() - started < capMs) {
    await new Promise((r) => setTimeout(r, 50));
    if (read() !== last) {
      last = read();
      quietSince = Date.now();
    }
  }
  return last;
}

it.each([
  { format: 'ndjson', query: 'trailer=true', first: '"verdict_id"' },
  { format: 'csv', query: 'format=csv', first: 'verdict_id,' },
])(
  '$format streams with backpressure: a client that stops reading stops the scan, and gets every row when it goes on',
  async ({ format, query, first: head }) => {
    const total = MARKETS * PER_MARKET;
    const agent = new Agent({ connect: { socketPath } });
    try {
      const before = store.verdictsRead;
      const res = await request(`http://localhost/api/verdicts?${query}`, {
        headers: { authorization: `Bearer ${key}` },
        dispatcher: agent,
      });
      expect(res.statusCode).toBe(200);
      const iterator = (res.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
      const first = await iterator.next();
      expect(String(first.value)).toContain(head);
      // The client reads nothing more: the server fills the socket and its own buffers, then must
      // stop reading the log. Not a timing assertion: wait until its reads stop moving.
      const read = (await settled(() => store.verdictsRead)) - before;
      // What the buffers between the scan and the client hold (a few hundred KB, ~1 KB a row) is a
      // small part of the log; a writer that reads ahead of its socket reads all of it.
      expect(read, `read ${read} of ${total} verdicts with the client stopped`).toBeLessThan(total / 4);
      let text = String(first.value);
      for (let next = await iterator.next(); !next.done; next = await iterator.next())
        text += String(next.value);
      const lines = text.trim().split('\n');
      // NDJSON: the rows and the trailer; CSV: the header and the rows.
      expect(lines).toHaveLength(total + 1);
      if (format === 'ndjson') {
        expect(new Set(lines.slice(0, -1).map((l) => JSON.parse(l).verdict_id)).size).toBe(total);
        expect(JSON.parse(lines.at(-1)!).rows).toBe(total);
      } else {
        expect(new Set(lines.slice(1).map((l) => l.split(',')[1])).size).toBe(total);
      }
    } finally {
      // destroy, not close: close waits for a response whose body a failed assertion left unread.
      await agent.destroy();
    }
  },
);

it('NDJSON sends the same bytes to a client that reads slowly as to one that reads at once', async () => {
  // The writer writes into a chunk again once the answer says every byte given has left
  // (writers.ts `sent`): over the Unix socket's small buffers, a slow reader keeps bytes pending.
  const headers = { authorization: `Bearer ${key}` };
  const fast = await (await request(`${server.url}/api/verdicts`, { headers })).body.text();
  const agent = new Agent({ connect: { socketPath } });
  try {
    const res = await request('http://localhost/api/verdicts', { headers, dispatcher: agent });
    const parts: Buffer[] = [];
    let n = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      parts.push(chunk);
      // A pause every few reads: the socket fills, then drains, many times over the export.
      if (++n % 4 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    const slow = Buffer.concat(parts).toString();
    expect(slow.split('\n')).toHaveLength(MARKETS * PER_MARKET + 1);
    expect(slow === fast, 'the slow read differs from the fast one').toBe(true);
  } finally {
    await agent.destroy();
  }
});

/** Counts the turns of the event loop (one immediate a turn) while `work` runs. */
async function turnsDuring(work: () => Promise<unknown>): Promise<number> {
  let turns = 0;
  let counting = true;
  const tick = () => {
    turns++;
    if (counting) setImmediate(tick);
  };
  setImmediate(tick);
  try {
    await work();
  } finally {
    counting = false;
  }
  return turns;
}

const scan = () =>
  scanHistory(
    store,
    { filter: {}, after: 0, limit: Number.POSITIVE_INFINITY, now: Date.now },
    new ScanProgress(0, null),
  );

it('a scan lets the event loop turn between two pages, however fast its reader takes them', async () => {
  // The store answers at once and the reader takes each page at once: without the wait, the
  // whole log is one chain of promise jobs, and no other request is served until it ends.
  let pages = 0;
  let rows = 0;
  const turns = await turnsDuring(async () => {
    for await (const page of scan()) {
      pages++;
      rows += page.length;
    }
  });
  expect(rows).toBe(MARKETS * PER_MARKET);
  expect(turns, `${turns} turns over ${pages} pages`).toBeGreaterThanOrEqual(pages - 1);
});

it('Parquet encoded on this thread reaches the writer a slice at a time, the event loop turning between slices', async () => {
  const all: HistoryRow[] = [];
  for await (const page of scan()) all.push(...page);
  // One batch of every row, from a source that answers at once: only the writer can turn.
  const chunks: Buffer[] = [];
  const turns = await turnsDuring(async () => {
    for await (const chunk of parquetStream([all], undefined, undefined, null)) chunks.push(chunk as Buffer);
  });
  expect(Buffer.concat(chunks).subarray(0, 4).toString()).toBe('PAR1');
  // 10,000 rows: 2 row groups in the file, handed over in 1,024-row slices (whole, 3 turns).
  const slices = Math.ceil(all.length / 1_024);
  expect(turns, `${turns} turns for ${all.length} rows`).toBeGreaterThanOrEqual(slices);
});
