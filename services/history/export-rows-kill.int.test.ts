import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { open } from 'lmdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent } from '../../contracts/events.ts';
import { outcomeStream } from '../../contracts/history.ts';
import {
  appendSyntheticHistory,
  syntheticMarket,
  syntheticOutcome,
  syntheticVerdict,
} from '../../test/history-harness.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';
import {
  ExportRowStore,
  OUTCOMES_DB,
  openExportRowsEnvironment,
  openVerdictsDb,
} from './export-row-store.ts';
import { F_ID, fieldOf } from './export-rows.ts';

const child = fileURLToPath(new URL('./export-rows-kill-child.ts', import.meta.url));
/** 12,000 verdicts with the engine's inputs and 1,200 outcomes: seven pages of the log feed (2,000). */
const MARKETS = 200;
const PER_MARKET = 60;
const WITH_OUTCOME = 6;

let dir: string;
let refDir: string;
let store: LmdbEventStore;
let head: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'export-rows-kill-'));
  refDir = mkdtempSync(join(tmpdir(), 'export-rows-kill-ref-'));
  store = await openLmdbEventStore({ path: dir });
  const firsts: {
    id: string;
    stream: string;
    revision: number;
    data: ReturnType<typeof syntheticVerdict>;
  }[] = [];
  for (let m = 0; m < MARKETS; m++) {
    const stream = verdictStream(syntheticMarket(m));
    let prev: string | null = null;
    const events = [];
    for (let n = 0; n < PER_MARKET; n++) {
      const data = syntheticVerdict(m, n, PER_MARKET, prev, true);
      prev = data.hash;
      const id = deterministicId('kill', stream, n);
      events.push(newEvent('VerdictRecorded', data, { id }));
      if (n < WITH_OUTCOME) firsts.push({ id, stream, revision: n, data });
    }
    await store.append(stream, events);
  }
  for (const { id, stream, revision, data } of firsts)
    await store.append(
      outcomeStream(id),
      [newEvent('VerdictOutcomeResolved', syntheticOutcome(data, id, stream, revision))],
      { expectedRevision: 'no_stream' },
    );
  head = await store.headPosition();
}, 120_000);

afterAll(async () => {
  await store?.close();
  for (const d of [dir, refDir]) if (d) rmSync(d, { recursive: true, force: true });
});

/** Starts the child folding into `<dir>/export-rows`; resolves with its lines as they come. */
function fold(): { proc: ChildProcess; lines: AsyncIterator<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', child, dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  return { proc, lines };
}

describe('export rows in their own environment, killed mid-fold', () => {
  it('a fold killed with SIGKILL again and again resumes from its checkpoint: every row once, the bytes one whole fold writes', async () => {
    const killedAt: number[] = [];
    for (let k = 0; k < 5; k++) {
      const { proc, lines } = fold();
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      const ready = JSON.parse((await lines.next()).value as string) as { checkpoint: number };
      // Resumed where the last one's last committed page left it, never behind it.
      if (killedAt.length > 0) expect(ready.checkpoint).toBeGreaterThanOrEqual(killedAt.at(-1)!);
      if (ready.checkpoint >= head) {
        proc.kill('SIGKILL');
        await exited;
        break;
      }
      // Killed as soon as one more page is committed: the next page's transaction is under way.
      let last = ready.checkpoint;
      while (last === ready.checkpoint)
        last = (JSON.parse((await lines.next()).value as string) as { checkpoint: number }).checkpoint;
      proc.kill('SIGKILL');
      await exited;
      killedAt.push(last);
    }
    // Killed mid-fold at least three times (neither before its first page nor after its last).
    expect(killedAt.filter((c) => c > 0 && c < head).length).toBeGreaterThanOrEqual(3);

    const rows = new ExportRowStore(store, openExportRowsEnvironment(dir), {
      logRoot: store.root,
      ownsRoot: true,
    });
    const refEnv = open({ path: refDir, noSubdir: false, maxDbs: 8, overlappingSync: false });
    const ref = new ExportRowStore(store, refEnv);
    try {
      await rows.start();
      await ref.start();
      await rows.waitFor(head, 60_000);
      await ref.waitFor(head, 60_000);
      const got = rows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e9);
      const want = ref.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e9);
      expect(got).toHaveLength(MARKETS * PER_MARKET);
      expect(got.map((e) => e.key)).toEqual(want.map((e) => e.key));
      expect(got.map((e) => Buffer.from(e.value).toString('hex'))).toEqual(
        want.map((e) => Buffer.from(e.value).toString('hex')),
      );
      const outcomes = (s: ExportRowStore) =>
        got.map((e) => s.outcome(fieldOf(e.value, F_ID))?.toString('hex') ?? null);
      expect(outcomes(rows).filter((o) => o !== null)).toHaveLength(MARKETS * WITH_OUTCOME);
      expect(outcomes(rows)).toEqual(outcomes(ref));
      // Nothing beside them either: the same keys below the rows (meta, templates) and outcomes.
      const entries = (root: typeof refEnv, name: string) =>
        (root.openDB({ name, encoding: 'binary' }).getStats() as { entryCount: number }).entryCount;
      const env = rows.environment;
      expect([...openVerdictsDb(env).getKeys()].length).toBe([...openVerdictsDb(refEnv).getKeys()].length);
      expect(entries(env, OUTCOMES_DB)).toBe(entries(refEnv, OUTCOMES_DB));
    } finally {
      await rows.close();
      await ref.stop();
      await refEnv.close();
    }
  }, 300_000);

  it('rows folded from another log than the one in the directory now are rebuilt from it', async () => {
    // Log A, its rows folded into <A>/export-rows; then a log B in A's place (a log restored from
    // a backup, which holds no rows), with more events than A's checkpoint.
    const aDir = mkdtempSync(join(tmpdir(), 'export-rows-other-log-'));
    try {
      const a = await openLmdbEventStore({ path: aDir });
      await appendSyntheticHistory(a, { markets: 3, perMarket: 10, idPrefix: 'log-a' });
      const aRows = new ExportRowStore(a, openExportRowsEnvironment(aDir), { ownsRoot: true });
      await aRows.start();
      await aRows.waitFor(await a.headPosition(), 30_000);
      expect(aRows.checkpoint).toBe(30);
      await aRows.close();
      await a.close();

      const bRows = new ExportRowStore(store, openExportRowsEnvironment(aDir), { ownsRoot: true });
      try {
        await bRows.start();
        await bRows.waitFor(head, 60_000);
        const ids = bRows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e9).map((e) => fieldOf(e.value, F_ID));
        const logIds: string[] = [];
        for (let after = 0; ; ) {
          const page = await store.readAll({ after, maxCount: 2_000 });
          if (page.length === 0) break;
          for (const e of page) if (e.type === 'VerdictRecorded') logIds.push(e.id);
          after = page.at(-1)!.position;
        }
        expect(ids).toEqual(logIds);
      } finally {
        await bRows.close();
      }
    } finally {
      rmSync(aDir, { recursive: true, force: true });
    }
  }, 120_000);
});
