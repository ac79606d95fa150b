import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HistoryRow, replayLapOf } from '../../contracts/history.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { runHistoryCommand } from './cli-commands.ts';
import { readExport } from './files.ts';

/** The end of the shipped slice's data: feed time past it is a looped lap. */
const DATA_END = Date.UTC(2025, 10, 1);

/** The decimals a price is written with (103538.01 has 2). */
const decimalsOf = (p: number) => (String(p).split('.')[1] ?? '').length;

let dir: string;

/** A history recorded from the data's end into the replay's first looped lap, labelled by the resolver, exported whole. */
async function lappedExport(name: string, exactLaps: boolean) {
  const fx = await recordHistory({ steps: 12, settleHours: 30, start: DATA_END, exactLaps });
  const server = await startHistoryServer({ store: fx.store, feed: fx.feed });
  try {
    await server.settle();
    const out = join(dir, `${name}.ndjson`);
    const deps = { openStore: async () => fx.store, progress: null };
    await runHistoryCommand(['export', '--store', '--out', out], deps);
    const rows: HistoryRow[] = [];
    for await (const row of readExport(out)) rows.push(row);
    const verified = JSON.parse(
      await runHistoryCommand(['verify', out, '--data', 'sample-data/market'], deps),
    );
    return { rows, verified };
  } finally {
    await server.close();
    await fx.engine.close();
  }
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'recompute-laps-'));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('history verify --data over a looped lap', () => {
  it("records a lapped verdict's price on the venue's tick, and recomputes its outcome from the same rounded candles", async () => {
    const { rows, verified } = await lappedExport('rounded', false);
    const lapped = rows.filter((r) => r.revealed && replayLapOf(JSON.parse(r.inputs_json!)) === 1);
    expect(lapped.length).toBeGreaterThan(0);
    // On the data's ticks (at most 2 decimals for BTC, ETH and SOL): no price has a float tail.
    for (const r of lapped) expect(decimalsOf(r.price!), `${r.coin} ${r.price}`).toBeLessThanOrEqual(2);
    expect(lapped.filter((r) => r.result !== null).length).toBeGreaterThan(0);
    const labelled = rows.filter((r) => r.result !== null).length;
    expect(verified.ok).toBe(true);
    expect(verified.recomputed).toMatchObject({ checked: labelled, notInData: 0, mismatched: 0 });
  });

  it('takes an outcome labelled from the lap prices as scaled (a replay that did not round them) as matching', async () => {
    const { rows, verified } = await lappedExport('exact', true);
    // Prices with the float tail of their scaling: what such a replay recorded.
    const lapped = rows.filter((r) => r.result !== null && replayLapOf(JSON.parse(r.inputs_json!)) === 1);
    expect(lapped.some((r) => decimalsOf(r.price!) > 2)).toBe(true);
    const labelled = rows.filter((r) => r.result !== null).length;
    expect(verified.ok).toBe(true);
    expect(verified.recomputed).toMatchObject({ checked: labelled, notInData: 0, mismatched: 0 });
  });
});
