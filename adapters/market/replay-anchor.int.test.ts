import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../event-store/lmdb.ts';
import { openReplayFeed } from './replay.ts';
import { anchorInLog, REPLAY_CLOCK_STREAM } from './replay-anchor.ts';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('replay clock anchored in the event log', () => {
  it('is shared by every process and a restarted engine on the same DATA_DIR does not rewind', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'anchor-'));
    dirs.push(dataDir);
    let wall = Date.UTC(2026, 0, 1);
    const wallNow = () => wall;
    const open = async (store: Awaited<ReturnType<typeof openLmdbEventStore>>, speed: number) =>
      openReplayFeed({ speed, wallNow, anchorStore: (p) => anchorInLog(store, p) });

    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const api = await open(store, 600);
    const start = api.now();
    wall += 2_000;
    // A second process of the same deployment, started later, reads the same clock.
    const engine = await open(store, 600);
    expect(engine.now()).toBe(api.now());
    expect(engine.now()).toBe(start + 2_000 * 600);
    const before = engine.now();
    await engine.close();
    await api.close();
    await store.close();

    // Restart on the same DATA_DIR, even with another speed configured: the recorded clock wins.
    wall += 3_000;
    const reopened = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const restarted = await open(reopened, 60);
    expect(restarted.now()).toBeGreaterThan(before);
    expect(restarted.now()).toBe(start + 5_000 * 600);
    expect(await reopened.readStream(REPLAY_CLOCK_STREAM)).toHaveLength(1);
    await restarted.close();
    await reopened.close();
  });

  it('two processes racing to record the anchor agree on one', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'anchor-race-'));
    dirs.push(dataDir);
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const proposals = [1, 2, 3].map((i) => ({ anchor: 1000 * i, start: 5000, speed: 600, dir: 'x' }));
    const held = await Promise.all(proposals.map((p) => anchorInLog(store, p)));
    expect(new Set(held.map((h) => h.anchor)).size).toBe(1);
    await store.close();
  });
});
