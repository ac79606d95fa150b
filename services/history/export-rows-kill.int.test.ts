import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { open, type RootDatabase } from 'lmdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent } from '../../contracts/events.ts';
import { outcomeStream } from '../../contracts/history.ts';
import { syntheticMarket, syntheticOutcome, syntheticVerdict } from '../../test/history-harness.ts';
import { HANG_MS } from '../../test/waits.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';
import { ExportRowStore, OUTCOMES_DB, openVerdictsDb } from './export-row-store.ts';
import { F_ID, fieldOf } from './export-rows.ts';

const child = fileURLToPath(new URL('./export-rows-kill-child.ts', import.meta.url));
/**
 * 30,000 verdicts with the engine's inputs and 1,200 outcomes: sixteen pages of the log feed
 * (2,000), so five kills, each costing a child one or two pages, end before the log does.
 */
const MARKETS = 200;
const PER_MARKET = 150;
const WITH_OUTCOME = 6;
/** Kills of a fold under way, each after it was seen to commit a page of its own. */
const KILLS = 5;

let dir: string;
let refDir: string;
let store: LmdbEventStore;
let head: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'export-rows-kill-'));
  refDir = mkdtempSync(join(tmpdir(), 'export-rows-kill-ref-'));
  store = await openLmdbEventStore({ path: dir });
  // Each market's outcomes right after its verdicts: every page of the feed holds both.
  for (let m = 0; m < MARKETS; m++) {
    const stream = verdictStream(syntheticMarket(m));
    let prev: string | null = null;
    const events = [];
    const verdicts: ReturnType<typeof syntheticVerdict>[] = [];
    for (let n = 0; n < PER_MARKET; n++) {
      const data = syntheticVerdict(m, n, PER_MARKET, prev, true);
      prev = data.hash;
      verdicts.push(data);
      events.push(newEvent('VerdictRecorded', data, { id: deterministicId('kill', stream, n) }));
    }
    await store.append(stream, events);
    for (let n = 0; n < WITH_OUTCOME; n++) {
      const id = deterministicId('kill', stream, n);
      await store.append(
        outcomeStream(id),
        [newEvent('VerdictOutcomeResolved', syntheticOutcome(verdicts[n]!, id, stream, n))],
        { expectedRevision: 'no_stream' },
      );
    }
  }
  head = await store.headPosition();
}, 120_000);

afterAll(async () => {
  await store?.close();
  for (const d of [dir, refDir]) if (d) rmSync(d, { recursive: true, force: true });
});

/** Starts the child folding into the log's environment at `dir`; its lines as they come. */
function fold(): { proc: ChildProcess; lines: AsyncIterator<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', child, dir], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  return { proc, lines };
}

async function checkpointLine(lines: AsyncIterator<string>): Promise<number> {
  const line = await lines.next();
  if (line.done) throw new Error('the fold ended before printing its checkpoint');
  return (JSON.parse(line.value) as { checkpoint: number }).checkpoint;
}

/** The checkpoint the projection's meta (key 0) holds, as the last fold committed it; null without one. */
function committed(root: RootDatabase): number | null {
  const meta = openVerdictsDb(root).get(0);
  return meta ? (JSON.parse(meta.toString('utf8')) as [number, string, number])[2] : null;
}

/** Every entry of a database but those of `skip`, as [key, hex of the stored bytes]. */
function entries(
  root: RootDatabase,
  which: 'verdicts' | 'outcomes',
  skip: unknown[] = [],
): [unknown, string][] {
  const db =
    which === 'verdicts' ? openVerdictsDb(root) : root.openDB({ name: OUTCOMES_DB, encoding: 'binary' });
  const out: [unknown, string][] = [];
  for (const { key, value } of db.getRange())
    if (!skip.includes(key)) out.push([key, Buffer.from(value as Uint8Array).toString('hex')]);
  return out;
}

describe('export rows in the log environment, killed mid-fold', () => {
  it('a fold killed with SIGKILL again and again resumes from its checkpoint: every row and outcome once, the bytes of one whole fold', async () => {
    /** Per child: the checkpoint it started from and the last one it was seen to commit before its kill. */
    const runs: { startedAt: number; seenAt: number }[] = [];
    for (let k = 0; k < KILLS; k++) {
      const { proc, lines } = fold();
      const exited = new Promise<NodeJS.Signals | null>((resolve) =>
        proc.once('exit', (_code, signal) => resolve(signal)),
      );
      try {
        const startedAt = await checkpointLine(lines);
        // Resumed where the last one's last committed page left it, never behind it, and with
        // rows still to fold: the last one was killed before its fold finished.
        if (runs.length > 0) {
          expect(startedAt).toBeGreaterThanOrEqual(runs.at(-1)!.seenAt);
          expect(startedAt).toBeLessThan(head);
        }
        // Killed as soon as it commits one more page of its own, the fold then on its next one.
        let seenAt = startedAt;
        while (seenAt === startedAt) seenAt = await checkpointLine(lines);
        runs.push({ startedAt, seenAt });
      } finally {
        proc.kill('SIGKILL');
      }
      expect(await exited).toBe('SIGKILL');
    }
    // Each child folded at least one page of its own and was killed before the end of the log.
    for (const { startedAt, seenAt } of runs) {
      expect(seenAt).toBeGreaterThan(startedAt);
      expect(seenAt).toBeLessThan(head);
    }
    expect(runs[0]!.startedAt).toBe(0);

    const rows = new ExportRowStore(store, store.root);
    const refEnv = open({ path: refDir, noSubdir: false, maxDbs: 8, overlappingSync: false });
    const ref = new ExportRowStore(store, refEnv);
    try {
      // The last child was killed mid-fold too: this fold resumes from its checkpoint.
      expect(committed(store.root)).toBeGreaterThanOrEqual(runs.at(-1)!.seenAt);
      expect(committed(store.root)).toBeLessThan(head);
      expect(committed(refEnv)).toBeNull();
      await rows.start();
      await ref.start();
      await rows.waitFor(head, HANG_MS);
      await ref.waitFor(head, HANG_MS);
      expect(rows.checkpoint).toBe(head);
      expect(rows.checkpointId).toBe(ref.checkpointId);

      const got = rows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e9);
      const want = ref.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e9);
      expect(got).toHaveLength(MARKETS * PER_MARKET);
      expect(new Set(got.map((e) => fieldOf(e.value, F_ID))).size).toBe(MARKETS * PER_MARKET);
      // As the export reads them: the same positions and bytes.
      expect(got.map((e) => [e.key, Buffer.from(e.value).toString('hex')])).toEqual(
        want.map((e) => [e.key, Buffer.from(e.value).toString('hex')]),
      );
      const outcomes = got.map((e) => rows.outcome(fieldOf(e.value, F_ID))?.toString('hex') ?? null);
      expect(outcomes.filter((o) => o !== null)).toHaveLength(MARKETS * WITH_OUTCOME);
      expect(outcomes).toEqual(got.map((e) => ref.outcome(fieldOf(e.value, F_ID))?.toString('hex') ?? null));
      // Byte for byte, everything the projection stores: every record, template and outcome
      // (the meta differs by its generation id only, checked above through the checkpoint).
      const verdicts = entries(store.root, 'verdicts', [0]);
      expect(verdicts.filter(([key]) => (key as number) < 0).length).toBeGreaterThan(0);
      expect(verdicts).toHaveLength(
        MARKETS * PER_MARKET + verdicts.filter(([key]) => (key as number) < 0).length,
      );
      expect(verdicts).toEqual(entries(refEnv, 'verdicts', [0]));
      expect(entries(store.root, 'outcomes')).toEqual(entries(refEnv, 'outcomes'));
    } finally {
      await rows.stop();
      await ref.stop();
      await refEnv.close();
    }
  }, 300_000);
});
