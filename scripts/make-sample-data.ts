/**
 * Cuts the shipped replay slice (sample-data/market) from the full shared data set. Rows are
 * copied verbatim (no re-formatting of numbers), in the same layout and format (gzip CSV).
 *
 *   npx tsx scripts/make-sample-data.ts [--from ../shared/data/market] [--out sample-data/market]
 *
 * The window is where candles (to 2025-10-31) and the funding of Binance, Bybit and
 * Hyperliquid (from 2025-08-21) overlap, and includes the 10 Oct 2025 liquidation cascade.
 */

import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync, gzipSync } from 'node:zlib';
import { SHARED_MARKET_DIR } from '../adapters/market/shared-data.ts';

const WINDOW_START = Date.UTC(2025, 8, 20); // 2025-09-20T00:00Z
/** 1h candles reach further back: 1d needs about 110 daily candles before its first verdict. */
const HOURLY_START = Date.UTC(2025, 2, 1); // 2025-03-01T00:00Z
const WINDOW_END = Date.UTC(2025, 10, 1); // 2025-11-01T00:00Z, exclusive
const COINS = ['BTC', 'ETH', 'SOL', 'BNB', 'XRP', 'DOGE'];

/** Files to cut, relative to the data root; `{C}` is the coin. */
const FILES: Array<{ pattern: string; from: number }> = [
  { pattern: 'candles/binance-spot/{C}USDT-5m.csv.gz', from: WINDOW_START },
  { pattern: 'candles/binance-spot/{C}USDT-1h.csv.gz', from: HOURLY_START },
  { pattern: 'candles/binance-usdm/{C}USDT-1h.csv.gz', from: HOURLY_START },
  { pattern: 'funding/binance/{C}USDT.csv.gz', from: WINDOW_START },
  { pattern: 'funding/binance-usdm/{C}USDT.csv.gz', from: WINDOW_START },
  { pattern: 'funding/bybit/{C}USDT.csv.gz', from: WINDOW_START },
  { pattern: 'funding/hyperliquid/{C}.csv.gz', from: WINDOW_START },
];

async function cut(source: string, target: string, from: number): Promise<number> {
  const lines = gunzipSync(await readFile(source))
    .toString('utf8')
    .split('\n');
  const header = lines[0];
  if (header === undefined || !/^(open_time|funding_time),/.test(header)) {
    throw new Error(`${source}: unexpected header ${header}`);
  }
  const kept = lines.slice(1).filter((line) => {
    const t = Number(line.slice(0, line.indexOf(',')));
    return line !== '' && t >= from && t < WINDOW_END;
  });
  if (kept.length === 0) throw new Error(`${source}: no rows inside the window`);
  await mkdir(dirname(target), { recursive: true });
  await writeFile(target, gzipSync(`${[header, ...kept].join('\n')}\n`, { level: 9 }));
  return kept.length;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      from: { type: 'string', default: SHARED_MARKET_DIR },
      out: { type: 'string', default: 'sample-data/market' },
    },
  });
  const from = resolve(values.from);
  const out = resolve(values.out);
  let total = 0;
  for (const coin of COINS) {
    for (const { pattern, from: start } of FILES) {
      const rel = pattern.replace('{C}', coin);
      const rows = await cut(join(from, rel), join(out, rel), start);
      const size = (await stat(join(out, rel))).size;
      total += size;
      console.log(`${rel}: ${rows} rows, ${size} bytes`);
    }
  }
  console.log(`total ${total} bytes in ${out}`);
}

await main();
