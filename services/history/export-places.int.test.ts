import { connect } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { appendSyntheticHistory, startHistoryServer } from '../../test/history-harness.ts';
import { decodeCursor } from './cursor.ts';
import { MAX_EXPORTS_PER_KEY } from './routes.ts';

const store = new MemoryEventStore();
let server: Awaited<ReturnType<typeof startHistoryServer>>;

/** While set, the route's look-up of the `after=` cursor at `position` (a one-event read) waits for it. */
let cursorLookUp: { position: number; reached: () => void; release: Promise<void> } | null = null;

beforeAll(async () => {
  await appendSyntheticHistory(store, { markets: 4, perMarket: 50, idPrefix: 'export-places' });
  const readAll = store.readAll.bind(store);
  store.readAll = async (options) => {
    const gate = cursorLookUp;
    if (gate !== null && options?.maxCount === 1 && options.after === gate.position - 1) {
      gate.reached();
      await gate.release;
    }
    return readAll(options);
  };
  server = await startHistoryServer({ store, feed: null });
});
afterAll(async () => {
  await server?.close();
});

const verdicts = (key: string, query = '') =>
  request(`${server.url}/api/verdicts${query}`, { headers: { authorization: `Bearer ${key}` } });

it("a client gone while its export was still being checked gives its key's place back", async () => {
  const key = await server.issue();
  const trailer = (await (await verdicts(key, '?trailer=true&limit=1')).body.text())
    .trim()
    .split('\n')
    .at(-1)!;
  const cursor = (JSON.parse(trailer) as { cursor: string }).cursor;
  const position = decodeCursor(cursor)!.position;
  const after = encodeURIComponent(cursor);
  const { hostname, port } = new URL(server.url);
  // As many as the key's places, each leaving while the route awaits its cursor's look-up: its
  // 'close' came before the route listened for it, and before, the place it took stayed taken.
  for (let i = 0; i < MAX_EXPORTS_PER_KEY; i++) {
    let reached!: () => void;
    let release!: () => void;
    const lookedUp = new Promise<void>((resolve) => {
      reached = resolve;
    });
    cursorLookUp = { position, reached, release: new Promise((resolve) => (release = resolve)) };
    const socket = connect({ host: hostname, port: Number(port) });
    socket.on('error', () => undefined);
    socket.write(
      `GET /api/verdicts?after=${after} HTTP/1.1\r\nhost: ${hostname}:${port}\r\nauthorization: Bearer ${key}\r\n\r\n`,
    );
    await lookedUp;
    await new Promise<void>((resolve) => socket.destroy().once('close', () => resolve()));
    // The server has seen the connection end before the look-up answers.
    await new Promise((resolve) => setTimeout(resolve, 50));
    cursorLookUp = null;
    release();
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const res = await verdicts(key, '?limit=1');
  expect(res.statusCode, await res.body.text()).toBe(200);
});
