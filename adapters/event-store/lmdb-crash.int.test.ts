import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { openLmdbEventStore } from './lmdb.ts';

/**
 * How long the contention test may wait for its events (240 s: under load 120 appends once took
 * over 90 s) and then for its writers to exit once done (50 s), before failing with its state;
 * together under the test's 300 s deadline.
 */
const STUCK_MS = Number(process.env.LMDB_CONTEND_STUCK_MS ?? 240_000);
const EXIT_STUCK_MS = Math.min(STUCK_MS, 50_000);
const writerScript = fileURLToPath(new URL('./lmdb-crash-writer.ts', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'lmdb-crash-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Writer {
  child: ChildProcess;
  lines: Array<Record<string, unknown>>;
  /** Resolves once `predicate` holds for the lines read so far. */
  until(predicate: (lines: Array<Record<string, unknown>>) => boolean): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
}

function startWriter(args: string[]): Writer {
  const child = spawn(process.execPath, ['--import', 'tsx', writerScript, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Array<Record<string, unknown>> = [];
  const waiters: Array<() => void> = [];
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    // A kill can cut the last line short; only whole JSON lines were acknowledged.
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      return;
    }
    for (const wake of waiters.splice(0)) wake();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>(
    (resolve) => {
      child.on('exit', (code, signal) => {
        for (const wake of waiters.splice(0)) wake();
        resolve({ code, signal, stderr });
      });
    },
  );
  return {
    child,
    lines,
    exited,
    async until(predicate) {
      while (!predicate(lines)) {
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(`writer exited early (${child.exitCode ?? child.signalCode}): ${stderr}`);
        }
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
  };
}

describe('LMDB event store across processes', () => {
  it('keeps every acknowledged append, whole batches only, after SIGKILL mid-write', async () => {
    const path = join(root, 'crash');
    const writer = startWriter(['crash', path]);
    try {
      await writer.until((lines) => lines.filter((l) => Array.isArray(l.ids)).length > 150);
    } finally {
      writer.child.kill('SIGKILL');
    }
    const exit = await writer.exited;
    expect(exit.signal).toBe('SIGKILL');
    const acked = writer.lines.filter((l) => Array.isArray(l.ids)) as Array<{
      position: number;
      nextRevision: number;
      stream: string;
      batchId: string;
      idKind: 'random' | 'ordered' | 'store';
      ids: string[];
    }>;
    expect(acked.length).toBeGreaterThan(150);
    // Batches of every kind of id were acknowledged (the store's own and the caller's ordered ones
    // are version 7, keyed behind the index's prefix), so the checks below cover each.
    expect(new Set(acked.map((a) => a.idKind))).toEqual(new Set(['random', 'ordered', 'store']));
    for (const ack of acked) {
      for (const id of ack.ids)
        expect(id[14], `${ack.idKind} id ${id}`).toBe(ack.idKind === 'random' ? '4' : '7');
    }

    const store = await openLmdbEventStore({ path });
    try {
      const log = await store.readAll();
      const head = await store.headPosition();
      expect(log.map((e) => e.position)).toEqual(Array.from({ length: head }, (_, i) => i + 1));
      const byPosition = new Map(log.map((e) => [e.position, e]));

      for (const ack of acked) {
        const events = ack.ids.map((_, i) => byPosition.get(ack.position - ack.ids.length + 1 + i));
        expect(events.map((e) => e?.id)).toEqual(ack.ids);
        expect(events.map((e) => e?.stream)).toEqual(ack.ids.map(() => ack.stream));
        expect(events[events.length - 1]?.revision).toBe(ack.nextRevision);
      }

      // All-or-nothing: every batch in the log, acknowledged or not, is complete and contiguous.
      const batches = new Map<string, RecordedEvent[]>();
      for (const e of log) {
        const { batchId } = e.data as { batchId: string };
        batches.set(batchId, [...(batches.get(batchId) ?? []), e]);
      }
      for (const events of batches.values()) {
        const { size } = events[0]!.data as { size: number };
        expect(events.map((e) => (e.data as { index: number }).index)).toEqual(
          Array.from({ length: size }, (_, i) => i),
        );
        expect(events[size - 1]!.position - events[0]!.position).toBe(size - 1);
      }
      expect(batches.size).toBeGreaterThanOrEqual(acked.length);
      expect(batches.size).toBeLessThanOrEqual(acked.length + 1);

      // The stream index and the id index agree with the log.
      const streams = [...new Set(log.map((e) => e.stream))];
      let indexed = 0;
      for (const stream of streams) {
        const events = await store.readStream(stream);
        expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));
        expect(events).toEqual(log.filter((e) => e.stream === stream));
        expect(await store.streamRevision(stream)).toBe(events.length - 1);
        indexed += events.length;
      }
      expect(indexed).toBe(log.length);
      for (const ack of acked) {
        const retry = ack.ids.map((id) => ({ id, type: 'CrashTick', data: {} }));
        expect(await store.append(ack.stream, retry)).toEqual({
          nextRevision: ack.nextRevision,
          position: ack.position,
          written: false,
        });
      }
      expect(await store.headPosition()).toBe(head);

      // And the store keeps working where the killed writer stopped.
      const next = await store.append('crash-0', [{ type: 'AfterCrash', data: {} }], {
        expectedRevision: (await store.streamRevision('crash-0')) ?? 'no_stream',
      });
      expect(next.position).toBe(head + 1);
    } finally {
      await store.close();
    }
  });

  it('opens its environment without overlappingSync, which lost acknowledged appends across processes', async () => {
    // Four writers x 200 contended appends to one directory: with lmdb-js's overlappingSync an
    // acknowledged append was missing from the log in 4 of 75 runs (800 acknowledged, 799 on
    // the log), in 0 of 150 without. Too rare to catch in one run of a suite, so the setting is
    // checked here; the contention test below also fails (with the lost position) if it returns.
    const store = await openLmdbEventStore({ path: join(root, 'no-overlap') });
    try {
      expect((store.root as unknown as { overlappingSync?: boolean }).overlappingSync).toBe(false);
    } finally {
      await store.close();
    }
  });

  it('serializes two processes appending to one stream with expected revisions', async () => {
    const path = join(root, 'contend');
    const stream = 'contended';
    const perWriter = 60;
    const observer = await openLmdbEventStore({ path, pollMs: 20 });
    const sub = observer.subscribeToAll();
    try {
      const writers = ['w1', 'w2'].map((w) => startWriter(['contend', path, stream, String(perWriter), w]));
      const seen: RecordedEvent[] = [];
      const collecting = (async () => {
        for await (const e of sub) {
          seen.push(e);
          if (seen.length === perWriter * 2) break;
        }
      })();
      // A writer that dies would leave the subscription waiting for events that never come:
      // fail with what it printed instead of at the deadline.
      const writerDied = new Promise<never>((_, reject) => {
        for (const [i, w] of writers.entries()) {
          void w.exited.then((exit) => {
            if (exit.code !== 0)
              reject(new Error(`writer w${i + 1} exited ${exit.code ?? exit.signal}: ${exit.stderr}`));
          });
        }
      });
      // A hang fails with where it stood (events seen, each writer's acknowledged appends, whether
      // it finished and exited) instead of at the test's deadline with nothing to go on.
      const exitedYet = writers.map(() => false);
      for (const [i, w] of writers.entries()) void w.exited.then(() => (exitedYet[i] = true));
      const withWatchdog = async <T>(phase: string, ms: number, work: Promise<T>): Promise<T> => {
        let timer: NodeJS.Timeout | undefined;
        const stuck = new Promise<never>((_, reject) => {
          timer = setTimeout(async () => {
            const state = writers.map((w, i) => ({
              writer: `w${i + 1}`,
              acked: w.lines.filter((l) => typeof l.id === 'string').length,
              finished: w.lines.some((l) => l.finished === true),
              exited: exitedYet[i],
            }));
            // Whether the log holds what the subscription missed (a stalled or skipping reader)
            // or not (a lost write): positions seen, the log read afresh, and acknowledged ones.
            const seenAt = new Set(seen.map((e) => e.position));
            const log = await observer.readAll().catch((err: unknown) => String(err));
            const ackedAt = writers.flatMap((w) =>
              w.lines.filter((l) => typeof l.position === 'number').map((l) => l.position as number),
            );
            const reader = {
              lastSeen: seen.at(-1)?.position ?? null,
              logNow: typeof log === 'string' ? log : log.length,
              head: await observer.headPosition().catch((err: unknown) => String(err)),
              ackedNotSeen: ackedAt.filter((p) => !seenAt.has(p)),
              ackedNotInLog:
                typeof log === 'string' ? null : ackedAt.filter((p) => !log.some((e) => e.position === p)),
            };
            reject(
              new Error(
                `stuck ${phase}: seen ${seen.length} of ${perWriter * 2}; ${JSON.stringify(state)}; ${JSON.stringify(reader)}`,
              ),
            );
          }, ms);
        });
        try {
          return await Promise.race([work, stuck]);
        } finally {
          clearTimeout(timer);
        }
      };
      await withWatchdog('collecting', STUCK_MS, Promise.race([collecting, writerDied]));
      const exits = await withWatchdog(
        'waiting for exits',
        EXIT_STUCK_MS,
        Promise.all(writers.map((w) => w.exited)),
      );
      for (const exit of exits) expect(exit).toMatchObject({ code: 0 });

      const events = await observer.readStream(stream);
      expect(events.map((e) => e.revision)).toEqual(Array.from({ length: perWriter * 2 }, (_, i) => i));
      expect(seen).toEqual(events);
      for (const [i, writer] of writers.entries()) {
        const name = `w${i + 1}`;
        const acked = writer.lines.filter((l) => typeof l.id === 'string') as Array<{
          id: string;
          nextRevision: number;
        }>;
        expect(acked).toHaveLength(perWriter);
        const mine = events.filter((e) => (e.data as { writer: string }).writer === name);
        expect(mine.map((e) => (e.data as { seq: number }).seq)).toEqual(
          Array.from({ length: perWriter }, (_, s) => s),
        );
        expect(mine.map((e) => e.id)).toEqual(acked.map((a) => a.id));
        expect(mine.map((e) => e.revision)).toEqual(acked.map((a) => a.nextRevision));
      }
    } finally {
      await sub.close();
      await observer.close();
    }
    // Two child processes started through tsx: on a loaded 2-core machine their start alone took
    // most of the default 30 s once. Every acknowledged append waits for its fsync, and the
    // writers take turns, so with other suites flushing to the same disk 120 appends once took
    // over 90 s. The deadline only catches a real hang.
  }, 300_000);
});
