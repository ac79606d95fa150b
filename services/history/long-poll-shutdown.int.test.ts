import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { HISTORY_MAX_WAIT_S, HistoryTrailer } from '../../contracts/history.ts';
import { appendSyntheticHistory, countWaitingLooks, startHistoryServer } from '../../test/history-harness.ts';

const store = new MemoryEventStore();
/** A long poll's looks once it waits (reads of a scan's first page that found nothing). */
const looks = countWaitingLooks(store);
let server: Awaited<ReturnType<typeof startHistoryServer>> | null = null;
let key: string;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: 1, perMarket: 3, idPrefix: 'long-poll-close' });
  server = await startHistoryServer({ store, feed: null });
  key = await server.issue();
});
afterAll(async () => {
  await server?.close();
});

async function ndjson(res: Response) {
  expect(res.status).toBe(200);
  const lines = (await res.text()).trim().split('\n');
  return { rows: lines.slice(0, -1), trailer: HistoryTrailer.parse(JSON.parse(lines.at(-1)!)) };
}

// A long poll waiting when the api stopped had its connection cut after the shutdown grace (5 s;
// curl: 000), leaving its client nothing to resume from.
it('answers a waiting long poll at once when the server closes: 200, no rows, the cursor to resume from', async () => {
  const running = server!;
  const auth = { authorization: `Bearer ${key}` };
  const end = await ndjson(await fetch(`${running.url}/api/verdicts?trailer=true`, { headers: auth }));
  expect(end.rows).toHaveLength(3);
  // The longest wait (HISTORY_MAX_WAIT_S): a poll the close did not answer would end only with it.
  const asked = Date.now();
  looks.count = 0;
  const waiting = fetch(
    `${running.url}/api/verdicts?wait=${HISTORY_MAX_WAIT_S}&trailer=true&after=${end.trailer.cursor}`,
    {
      headers: auth,
    },
  );
  // Closed once the poll waits: once it found no row after the cursor (not a fixed pause: a loaded
  // machine may start the request later than that).
  await expect.poll(() => looks.count).toBeGreaterThan(0);
  server = null;
  const closed = running.close();
  const answer = await ndjson(await waiting);
  // Its next look for rows sees the close (within 250 ms). Not a figure: a bound well inside the
  // wait, which a poll the close left waiting runs out whole (the harness closes without a grace
  // that cuts it), however slow the machine.
  expect(Date.now() - asked).toBeLessThan((HISTORY_MAX_WAIT_S - 10) * 1000);
  expect(answer.rows).toEqual([]);
  expect(answer.trailer.cursor).toBe(end.trailer.cursor);
  await closed;
});
