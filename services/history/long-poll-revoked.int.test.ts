import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { HistoryTrailer } from '../../contracts/history.ts';
import { appendSyntheticHistory, countWaitingLooks, startHistoryServer } from '../../test/history-harness.ts';
import { issueKey, revokeKey } from '../keys/key-commands.ts';

const store = new MemoryEventStore();
/** A long poll's looks once it waits (reads of a scan's first page that found nothing). */
const looks = countWaitingLooks(store);
let server: Awaited<ReturnType<typeof startHistoryServer>>;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: 1, perMarket: 3, idPrefix: 'long-poll-revoked' });
  server = await startHistoryServer({ store, feed: null });
});
afterAll(async () => {
  await server.close();
});

async function ndjson(res: Response) {
  expect(res.status).toBe(200);
  const lines = (await res.text()).trim().split('\n');
  return { rows: lines.slice(0, -1), trailer: HistoryTrailer.parse(JSON.parse(lines.at(-1)!)) };
}

// A long poll waiting when its key was revoked went on waiting (up to 30 s) and handed the revoked
// key the verdicts recorded meanwhile, though every call of that key was already refused 401.
it('ends a waiting long poll once its key is revoked, without the rows recorded after', async () => {
  const issued = await issueKey(store, { plan: 'pro', owner: 'revoked-analyst', via: 'operator' });
  await server.registry.waitFor(issued.position);
  const auth = { authorization: `Bearer ${issued.key}` };
  const end = await ndjson(await fetch(`${server.url}/api/verdicts?trailer=true`, { headers: auth }));
  expect(end.rows).toHaveLength(3);
  looks.count = 0;
  const waiting = fetch(`${server.url}/api/verdicts?wait=25&trailer=true&after=${end.trailer.cursor}`, {
    headers: auth,
  });
  // The long poll has reached its wait once it found no row after the cursor (not a fixed pause: a
  // loaded machine may start the request later than that).
  await expect.poll(() => looks.count).toBeGreaterThan(0);
  await server.registry.waitFor(await revokeKey(store, `apikey-${issued.keyId}`, issued.keyId, 'leaked'));
  // A verdict recorded after the revocation, which the wait would otherwise hand over.
  await appendSyntheticHistory(store, { markets: 1, perMarket: 1, idPrefix: 'long-poll-revoked-after' });
  const answer = await ndjson(await waiting);
  expect(answer.rows).toEqual([]);
  expect(answer.trailer.cursor).toBe(end.trailer.cursor);
  const refused = await fetch(`${server.url}/api/verdicts?after=${end.trailer.cursor}`, { headers: auth });
  expect(refused.status).toBe(401);
  await refused.body?.cancel();
});
