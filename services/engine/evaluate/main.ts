import { readdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { aggregateCandles } from '../../../adapters/market/aggregate.ts';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { parseCandleFileName } from '../../../adapters/market/replay-layout.ts';
import { SHARED_MARKET_DIR } from '../../../adapters/market/shared-data.ts';
import type { Timeframe } from '../../../contracts/market.ts';
import { CalibrationTableSchema } from '../../../contracts/signals.ts';
import { DEFAULT_HOLD_BAND } from '../signals/verdict.ts';
import { renderReport } from './report.ts';
import { reliabilitySvg } from './svg.ts';
import {
  collectSamples,
  evaluateTimeframe,
  fitTable,
  type Sample,
  type TimeframeResult,
} from './walk-forward.ts';

/**
 * `npm run evaluate`: walk-forward evaluation of the signal engine on the real candles of the
 * market data set; fits and writes the shipped calibration table, the report and the diagram.
 * A full run takes about a minute on two cores; `--max-coins` subsamples for quicker runs.
 */

const FROM_5M: Timeframe[] = ['5m', '15m', '30m'];
const FROM_1H: Timeframe[] = ['1h', '2h', '4h', '8h', '12h', '1d'];

const { values } = parseArgs({
  options: {
    data: { type: 'string', default: process.env.MARKET_DATA_DIR ?? SHARED_MARKET_DIR },
    split: { type: 'string', default: '2025-06-01' },
    /** Later splits of an expanding window: each refits on everything before it, tests after it. */
    'extra-splits': { type: 'string', default: '2025-08-01' },
    horizon: { type: 'string', default: '6' },
    'fee-bps': { type: 'string', default: '10' },
    'hold-band': { type: 'string', default: String(DEFAULT_HOLD_BAND) },
    'max-coins': { type: 'string', default: '0' },
    table: { type: 'string', default: 'services/engine/signals/calibration/table.json' },
    report: { type: 'string', default: 'docs/evaluation.md' },
    svg: { type: 'string', default: 'docs/evaluation-reliability.svg' },
  },
});

const started = performance.now();
const log = (msg: string) => console.log(`[${((performance.now() - started) / 1000).toFixed(1)}s] ${msg}`);

const split = Date.parse(`${values.split}T00:00:00Z`);
const extraSplits = values['extra-splits']
  .split(',')
  .filter((x) => x.trim() !== '')
  .map((x) => Date.parse(`${x.trim()}T00:00:00Z`));
const horizon = Number(values.horizon);
const feeBps = Number(values['fee-bps']);
const holdBand = Number(values['hold-band']);
const maxCoins = Number(values['max-coins']);
if (extraSplits.some((x) => !Number.isFinite(x) || x <= split)) {
  throw new Error('invalid --extra-splits: dates after --split, comma-separated');
}
if (!Number.isFinite(split) || !(horizon >= 1) || !(feeBps >= 0) || !(holdBand >= 0 && holdBand < 1)) {
  throw new Error('invalid --split, --horizon, --fee-bps or --hold-band');
}

async function candleFiles(
  folder: string,
  timeframe: Timeframe,
): Promise<Array<{ coin: string; path: string }>> {
  const dir = join(values.data, 'candles', folder);
  const names = (await readdir(dir)).sort();
  const files = names
    .map((name) => ({ name, parsed: parseCandleFileName(name) }))
    .filter((f) => f.parsed?.timeframe === timeframe)
    .map((f) => ({ coin: f.parsed!.coin, path: join(dir, f.name) }));
  return maxCoins > 0 ? files.slice(0, maxCoins) : files;
}

type SampleSet = Map<Timeframe, Sample[][]>;

async function collect(
  folder: string,
  base: '5m' | '1h',
  targets: Timeframe[],
  into: SampleSet,
): Promise<number> {
  const files = await candleFiles(folder, base);
  let candles = 0;
  for (const [i, f] of files.entries()) {
    const source = await readCandleFile(f.path);
    for (const tf of targets) {
      const series = tf === base ? source : aggregateCandles(source, base, tf);
      candles += series.length;
      const list = into.get(tf) ?? [];
      list.push(collectSamples(series, tf, horizon));
      into.set(tf, list);
    }
    log(
      `${folder} ${base} ${f.coin} (${i + 1}/${files.length}): ${source.length} candles → ${targets.join(', ')}`,
    );
  }
  return candles;
}

const main: SampleSet = new Map();
const era: SampleSet = new Map();
let total = 0;
total += await collect('binance-spot', '5m', FROM_5M, main);
total += await collect('binance-spot', '1h', FROM_1H, main);
total += await collect('binance-spot-2022', '5m', FROM_5M, era);
total += await collect('binance-spot-2022', '1h', FROM_1H, era);
log(`${total} closed candles streamed through the engine`);

const table = CalibrationTableSchema.parse(
  fitTable(main, { split, horizon, feeBps, holdBand }, { '1m': '5m', '3m': '5m' }),
);
const order = [...FROM_5M, ...FROM_1H];
const mainResults: TimeframeResult[] = order.map((tf) =>
  evaluateTimeframe(tf, main.get(tf) ?? [], table, split, Number.POSITIVE_INFINITY),
);
const folds = extraSplits.map((at) => {
  const foldTable = fitTable(main, { split: at, horizon, feeBps, holdBand }, { '1m': '5m', '3m': '5m' });
  log(`fold from ${new Date(at).toISOString().slice(0, 10)}: refitted on everything before it`);
  return {
    split: at,
    results: order.map((tf) =>
      evaluateTimeframe(tf, main.get(tf) ?? [], foldTable, at, Number.POSITIVE_INFINITY),
    ),
  };
});
const eraStart = Date.parse('2022-01-01T00:00:00Z');
const eraResults: TimeframeResult[] = order
  .filter((tf) => era.has(tf))
  .map((tf) => evaluateTimeframe(tf, era.get(tf)!, table, eraStart, split));

const seconds = (performance.now() - started) / 1000;
await writeFile(values.table, `${JSON.stringify(table, null, 2)}\n`);
await writeFile(
  values.svg,
  reliabilitySvg(
    mainResults.map((r) => ({ title: `${r.timeframe} (${r.calls.n} test calls)`, bins: r.reliability })),
  ),
);
await writeFile(
  values.report,
  renderReport({
    table,
    main: mainResults,
    era2022: eraResults,
    folds,
    dataDir: values.data,
    sources: [
      'binance-spot 5m → 5m/15m/30m',
      'binance-spot 1h → 1h/2h/4h/8h/12h/1d',
      'binance-spot-2022 as a second out-of-sample era',
    ],
    seconds,
    svgPath: relative('docs', values.svg),
    subsample:
      maxCoins > 0 ? `Subsampled: first ${maxCoins} coins per folder.` : 'All coins of those folders.',
  }),
);
for (const r of mainResults) {
  console.log(
    `${r.timeframe.padEnd(4)} ${r.direction === 1 ? 'follow' : 'fade  '} points ${String(r.points).padStart(6)} hold ${(100 * r.holdShare).toFixed(1)}% calls ${(100 * r.calls.rate).toFixed(1)}% (n ${r.calls.n}) buy ${(100 * r.buy.rate).toFixed(1)}% sell ${(100 * r.sell.rate).toFixed(1)}% | always-buy ${(100 * r.alwaysBuy.rate).toFixed(1)}% always-sell ${(100 * r.alwaysSell.rate).toFixed(1)}% random ${(100 * r.randomSameRate).toFixed(1)}% | brier ${r.brier.toFixed(4)} vs ${r.brierBaseRate.toFixed(4)} | ≥70 n ${r.buckets[3]!.rate.n} | top step ${r.topStep === null ? '–' : `${(100 * r.topStep.top.rate).toFixed(1)}% (n ${r.topStep.top.n}) vs ${(100 * r.topStep.below.rate).toFixed(1)}% (n ${r.topStep.below.n})`}`,
  );
}
log(`wrote ${values.table}, ${values.report}, ${values.svg}`);
