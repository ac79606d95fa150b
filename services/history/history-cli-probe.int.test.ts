import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import { runHistoryCommand, UsageError } from './cli-commands.ts';

describe('npm run history export --store: the filter check waits FEED_PROBE_TIMEOUT_MS for the venues', () => {
  it("names the configured wait in a 'served nowhere' refusal, not the built-in 3 s", async () => {
    // The replay's data: BINANCE_SPOT's BTC 1h candles, BINANCE's ETH 5m candles and its ETH 15m
    // candles on a FIFO no one writes to, whose read waits as one on a hung disk does: BINANCE gives
    // no answer about 15m and 30m (built from the 15m file). 1m no venue builds.
    const dir = mkdtempSync(join(tmpdir(), 'history-cli-probe-'));
    const shipped = join(SHIPPED_MARKET_DIR, 'candles', 'binance-spot');
    const [spot, perp] = ['binance-spot', 'binance-usdm'].map((folder) => join(dir, 'candles', folder));
    for (const folder of [spot!, perp!]) mkdirSync(folder, { recursive: true });
    copyFileSync(join(shipped, 'BTCUSDT-1h.csv.gz'), join(spot!, 'BTCUSDT-1h.csv.gz'));
    copyFileSync(join(shipped, 'ETHUSDT-5m.csv.gz'), join(perp!, 'ETHUSDT-5m.csv.gz'));
    const hung = join(perp!, 'ETHUSDT-15m.csv.gz');
    execFileSync('mkfifo', [hung]);
    const feed = await openReplayFeed({ dir, run: false });
    onTestFinished(async () => {
      // A writer that closes at once: the hung read ends.
      await writeFile(hung, '');
      await feed.close?.();
      rmSync(dir, { recursive: true, force: true });
    });
    // The healthy files read once, so that only the hung one can miss the deadline.
    for (const [exchange, coin] of [
      ['BINANCE_SPOT', 'BTC'],
      ['BINANCE', 'ETH'],
    ] as const) {
      await feed.markets(exchange);
      await feed.candles(exchange, coin, exchange === 'BINANCE' ? '5m' : '1h', { limit: 1 });
    }
    const withinMs = 1_000;
    const out = join(dir, 'export.ndjson');
    // A log of no verdict: the filter is judged by the feed.
    const refused = await runHistoryCommand(['export', '--store', '--timeframe', '1m', '--out', out], {
      progress: null,
      openStore: async () => new MemoryEventStore(),
      openFeed: async () => feed,
      feedProbeTimeoutMs: async () => withinMs,
    }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(UsageError);
    expect((refused as Error).message).toMatch(
      new RegExp(
        `^--timeframe: timeframe 1m is not available on any venue here .* gave no answer within ${withinMs} ms about .*, not listed \\(unsupported_timeframe\\)$`,
      ),
    );
    expect(existsSync(out)).toBe(false);
  }, 60_000);
});
