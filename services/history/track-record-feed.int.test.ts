import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventData } from '../../contracts/events.ts';
import { OUTCOME_AFTER_CANDLES, outcomeStream, TrackRecordResponse } from '../../contracts/history.ts';
import { TIMEFRAME_MS } from '../../contracts/market.ts';
import { HOUR, MARKETS, recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';
import { runHistoryCommand } from './cli-commands.ts';

/**
 * The shipped replay loops at the end of its data: the data is served again, shifted forward in
 * time, which can put the months the model was fitted on under later dates. A verdict whose
 * candle or whose outcome's candles fall in such a lap is marked in its inputs (its hash covers
 * the mark), and the track record counts none of them: it says how many it left out, and that
 * what it counts came from the replay feed.
 */
let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let dataEnd: number;

beforeAll(async () => {
  const probe = await recordHistory({ steps: 0 });
  dataEnd = probe.feed.laps!.end;
  await probe.engine.close();
  // From 30 hours before the end of the data to 10 hours into the first looped lap, then
  // 30 hours more for the outcomes to come due.
  fx = await recordHistory({ steps: 40, start: dataEnd - 30 * HOUR, settleHours: 30 });
  server = await startHistoryServer({ store: fx.store, feed: fx.feed });
  await server.settle();
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
});

describe('a looping replay in the track record', () => {
  it("marks the verdicts of a looped lap and counts none of them; the rest are said to be replay's", async () => {
    const marked: number[] = [];
    const counted: number[] = [];
    let resolvedLooped = 0;
    let resolvedCounted = 0;
    let countedDue = 0;
    for (const m of MARKETS) {
      for (const e of await fx.store.readStream(verdictStream(m))) {
        if (e.type !== 'VerdictRecorded') continue;
        const v = e.data as EventData<'VerdictRecorded'>;
        const due = v.candleCloseTime + OUTCOME_AFTER_CANDLES * TIMEFRAME_MS[v.timeframe];
        // Marked exactly when its outcome's last candle is past the end of the data.
        expect(v.inputs.replay_lap ?? 0, `${m.coin} ${m.timeframe} ${v.candleCloseTime}`).toBe(
          due > dataEnd ? 1 : 0,
        );
        (due > dataEnd ? marked : counted).push(v.candleCloseTime);
        const [outcome] = await fx.store.readStream(outcomeStream(e.id));
        if (!outcome) continue;
        const o = outcome.data as EventData<'VerdictOutcomeResolved'>;
        expect(o.replayLap ?? 0).toBe(v.inputs.replay_lap ?? 0);
        if (o.replayLap) resolvedLooped++;
        else {
          resolvedCounted++;
          countedDue = Math.max(countedDue, due);
        }
      }
    }
    expect(marked.length).toBeGreaterThan(0);
    expect(counted.length).toBeGreaterThan(0);
    expect(resolvedLooped).toBeGreaterThan(0);
    expect(resolvedCounted).toBeGreaterThan(0);

    const res = await fetch(`${server.url}/api/track-record?window=all`);
    expect(res.status).toBe(200);
    const tr = TrackRecordResponse.parse(await res.json());
    expect(tr.overall.feeds).toEqual({ live: 0, replay: resolvedCounted, replayLooped: resolvedLooped });
    // Every figure is of the counted verdicts only.
    expect(tr.overall.calls + tr.overall.holds).toBe(resolvedCounted);
    expect(tr.overall.risk.points + tr.overall.risk.unscored).toBe(resolvedCounted);
    expect(tr.lines.reduce((n, l) => n + l.feeds.replayLooped, 0)).toBe(resolvedLooped);
    expect(tr.feed).toBe('replay');
    expect(tr.feedNote).toContain('not a live track record');
    expect(tr.feedNote).toContain(`${resolvedLooped} resolved verdicts of the replay's looped laps`);
    // As of the latest outcome it counts: the looped outcomes, due past the data end, do not move it.
    expect(countedDue).toBeLessThanOrEqual(dataEnd);
    expect(tr.asOf).toBe(new Date(countedDue).toISOString());
  });

  it('history score over an export of the looped replay reproduces every window of the answer', async () => {
    const key = await server.issue();
    const dir = mkdtempSync(join(tmpdir(), 'track-record-feed-'));
    try {
      const out = join(dir, 'verdicts');
      const deps = { openStore: async () => fx.store, progress: null };
      await runHistoryCommand(['export', '--url', server.url, '--key', key, '--out', out], deps);
      for (const window of ['7d', '30d', 'all'] as const) {
        const res = await fetch(`${server.url}/api/track-record?window=${window}`);
        const live = TrackRecordResponse.parse(await res.json());
        const args = ['score', out, '--window', window, '--as-of', live.asOf];
        const offline = JSON.parse(
          await runHistoryCommand([...args, '--as-of-position', `${live.asOfPosition}`], deps),
        );
        // Figures, feed counts, the looped ones left out and the note alike.
        expect(offline, window).toEqual(live);
        expect(offline.overall.feeds.replayLooped, window).toBeGreaterThan(0);
        // By asOf alone it counts the outcomes due by then: every figure, none of the looped ones
        // (all due after the outcomes the figures count).
        const byTime = TrackRecordResponse.parse(JSON.parse(await runHistoryCommand(args, deps)));
        expect(byTime.overall).toEqual({
          ...live.overall,
          feeds: { ...live.overall.feeds, replayLooped: 0 },
        });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("serves a looped lap's trade call without its lap among the indicators", async () => {
    // The clock stands in the looped lap: the latest close's verdict is marked.
    const m = MARKETS[0]!;
    const call = await fx.engine.getTradeCall(m);
    const [latest] = (await fx.store.readStream(verdictStream(m)))
      .filter((e) => e.type === 'VerdictRecorded')
      .slice(-1);
    expect((latest!.data as EventData<'VerdictRecorded'>).inputs.replay_lap).toBe(1);
    expect(call.indicators).not.toHaveProperty('replay_lap');
    expect(Object.keys(call.indicators).length).toBeGreaterThan(0);
  });
});
