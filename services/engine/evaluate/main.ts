import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { aggregateCandles } from '../../../adapters/market/aggregate.ts';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { parseCandleFileName } from '../../../adapters/market/replay-layout.ts';
import { SHARED_MARKET_DIR } from '../../../adapters/market/shared-data.ts';
import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import {
  type CalibrationTable,
  CalibrationTableSchema,
  type VolatilityTable,
  VolatilityTableSchema,
} from '../../../contracts/signals.ts';
import { type CarryTable, parseCarryTable } from '../funding/carry.ts';
import { parseCalibrationTable } from '../signals/calibration.ts';
import { DEFAULT_HOLD_BAND, ENGINE_VERSION } from '../signals/verdict.ts';
import { parseVolatilityTable, VOL_HALF_LIVES } from '../signals/volatility.ts';
import {
  bandCoverage,
  type CallScore,
  type CellFit,
  type FoldWindow,
  fitCell,
  fitVolatility,
  foldWindows,
  gateEmits,
  type Kind,
  type Settings,
  scoreCalls,
  scoreVolatility,
  showsSkill,
  testPoints,
} from './cells.ts';
import { chooseStepShare, monthStarts, type StepShareChoice } from './curve-choice.ts';
import { type CarryEvaluation, evaluateCarry, fitCarryTable, loadFundingHistory } from './funding.ts';
import { type CellReport, renderReport, type VolReport } from './report.ts';
import { reliabilitySvg } from './svg.ts';
import { collectSamples, type Sample } from './walk-forward.ts';

/**
 * `npm run evaluate`: walk-forward evaluation of the three forecasts the engine sells (direction
 * where earned, volatility and expected move, funding carry) on the real data set. It fits and
 * writes the shipped tables, the report and the reliability diagram.
 *
 * `--score-only` refits nothing: it scores the shipped tables on `--data` (any directory in the
 * shared layout; folders it lacks are skipped) from `--from` (default: the tables' training end).
 */

const FROM_5M: Timeframe[] = ['5m', '15m', '30m'];
const FROM_1H: Timeframe[] = ['1h', '2h', '4h', '8h', '12h', '1d'];
const ORDER: Timeframe[] = [...FROM_5M, ...FROM_1H];
const BAND_COVERAGE = 0.8;

const OPTIONS = {
  data: { type: 'string', default: process.env.MARKET_DATA_DIR ?? SHARED_MARKET_DIR },
  split: { type: 'string', default: '2025-06-01' },
  /** Walk-forward folds inside the training months that decide which cells emit calls. */
  'gate-splits': { type: 'string', default: '2025-02-01,2025-04-01' },
  /** A later fold of the expanding window, for stability (it refits; nothing is chosen on it). */
  'extra-splits': { type: 'string', default: '2025-08-01' },
  /** Funding: carry decay fitted before this, scored after it. */
  'funding-split': { type: 'string', default: '2026-01-01' },
  horizon: { type: 'string', default: '6' },
  'fee-bps': { type: 'string', default: '10' },
  'hold-band': { type: 'string', default: String(DEFAULT_HOLD_BAND) },
  'max-coins': { type: 'string', default: '0' },
  'score-only': { type: 'boolean', default: false },
  from: { type: 'string' },
  table: { type: 'string', default: 'services/engine/signals/calibration/table.json' },
  'vol-table': { type: 'string', default: 'services/engine/signals/calibration/volatility.json' },
  'carry-table': { type: 'string', default: 'services/engine/funding/carry.json' },
  report: { type: 'string' },
  svg: { type: 'string', default: 'docs/evaluation-reliability.svg' },
  help: { type: 'boolean', default: false },
} as const;

const USAGE = `npm run evaluate -- [options]

Walk-forward evaluation of the engine's forecasts; fits and writes the shipped tables, the report
and the reliability diagram (or, with --score-only, scores the shipped tables and refits nothing).

  --data DIR            data directory in the shared layout (default: $MARKET_DATA_DIR or the shared data)
  --split DATE          start of the test months; every fit and choice uses months before it (default 2025-06-01)
  --gate-splits DATES   walk-forward folds inside the training months that decide which cells emit (default 2025-02-01,2025-04-01)
  --extra-splits DATES  later folds, scored as out-of-sample confirmation only (default 2025-08-01)
  --funding-split DATE  carry fitted before it, scored after it (default 2026-01-01)
  --horizon N           candles ahead a call is scored on (default 6)
  --fee-bps X           round-trip fee a call must beat (default 10)
  --hold-band X         |score| below which the engine answers HOLD (default ${DEFAULT_HOLD_BAND})
  --max-coins N         first N coins per folder only (0 = all)
  --score-only          score the shipped tables on --data, refit nothing; folders the data lacks are skipped
  --from DATE           with --score-only: score from this date (default: the tables' training end)
  --table, --vol-table, --carry-table FILE   where the tables are read or written
  --report FILE         report path (default docs/evaluation.md, docs/evaluation-score-only.md with --score-only)
  --svg FILE            reliability diagram path (default docs/evaluation-reliability.svg)
`;

/** A mistyped option or value is the user's slip, not a crash: say which and show the options. */
function usageError(message: string): never {
  process.stderr.write(`${message}\n\n${USAGE}`);
  process.exit(2);
}

function parseOptions() {
  try {
    return parseArgs({ options: OPTIONS }).values;
  } catch (err) {
    return usageError((err as Error).message);
  }
}

const values = parseOptions();
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

const started = performance.now();
const log = (msg: string) =>
  process.stdout.write(`[${((performance.now() - started) / 1000).toFixed(1)}s] ${msg}\n`);
const day = (x: string) => Date.parse(`${x.trim()}T00:00:00Z`);
const dates = (x: string) =>
  x
    .split(',')
    .filter((s) => s.trim() !== '')
    .map(day);

const scoreOnly = values['score-only'];
const split = day(values.split);
const gateSplits = dates(values['gate-splits']).sort((a, b) => a - b);
const extraSplits = dates(values['extra-splits']);
const fundingSplit = day(values['funding-split']);
const settings: Settings = {
  horizon: Number(values.horizon),
  feeBps: Number(values['fee-bps']),
  holdBand: Number(values['hold-band']),
};
const maxCoins = Number(values['max-coins']);
const reportPath = values.report ?? (scoreOnly ? 'docs/evaluation-score-only.md' : 'docs/evaluation.md');
for (const x of [split, fundingSplit, ...gateSplits, ...extraSplits]) {
  if (!Number.isFinite(x))
    usageError('invalid date in --split, --gate-splits, --extra-splits or --funding-split');
}
if (gateSplits.some((g) => g >= split) || extraSplits.some((x) => x <= split)) {
  usageError('--gate-splits must be before --split, --extra-splits after it');
}
if (
  !(settings.horizon >= 1) ||
  !(settings.feeBps >= 0) ||
  !(settings.holdBand >= 0 && settings.holdBand < 1)
) {
  usageError('invalid --horizon, --fee-bps or --hold-band');
}

type SampleSet = Map<Timeframe, Sample[][]>;

async function collect(
  folder: string,
  base: '5m' | '1h',
  targets: Timeframe[],
  into: SampleSet,
): Promise<void> {
  const dir = join(values.data, 'candles', folder);
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch {
    log(`skipped ${dir}: not in this data directory`);
    return;
  }
  let files = names
    .map((name) => ({ name, parsed: parseCandleFileName(name) }))
    .filter((f) => f.parsed?.timeframe === base);
  if (maxCoins > 0) files = files.slice(0, maxCoins);
  for (const [i, f] of files.entries()) {
    const source = await readCandleFile(join(dir, f.name));
    for (const tf of targets) {
      const series = tf === base ? source : aggregateCandles(source, base, tf);
      const list = into.get(tf) ?? [];
      list.push(collectSamples(series, tf, settings.horizon));
      into.set(tf, list);
    }
    log(`${folder} ${base} ${f.parsed!.coin} (${i + 1}/${files.length}): ${source.length} candles`);
  }
}

const spot: SampleSet = new Map();
const perp: SampleSet = new Map();
const era: SampleSet = new Map();
await collect('binance-spot', '5m', FROM_5M, spot);
await collect('binance-spot', '1h', FROM_1H, spot);
await collect('binance-usdm', '1h', FROM_1H, perp);
await collect('binance-spot-2022', '5m', FROM_5M, era);
await collect('binance-spot-2022', '1h', FROM_1H, era);
const sets: Record<Kind, SampleSet> = { spot, perp };

let table: CalibrationTable;
let volTable: VolatilityTable;
const cellReports: CellReport[] = [];
let curveChoice: StepShareChoice | null = null;
const label = (ms: number) => new Date(ms).toISOString().slice(0, 10);

if (!scoreOnly) {
  const curves: CalibrationTable['curves'] = {};
  const cells: CalibrationTable['cells'] = {};
  let trainFrom = Number.POSITIVE_INFINITY;
  const folds = foldWindows(gateSplits, split, extraSplits);
  const describe = (e: CellReport['evidence'][number]) =>
    `${e.label}: skill ${(100 * e.score.skill.value).toFixed(2)} pts, one-sided 95% day-block bound ${(100 * e.score.skill.dayBlock.lowOneSided).toFixed(2)}${e.agrees ? '' : ', fitted sign differs'} → ${e.pass ? 'pass' : 'fail'}`;
  const foldLabel = (w: FoldWindow) =>
    `fold fit < ${label(w.from)}, test ${label(w.from)} → ${Number.isFinite(w.to) ? label(w.to) : 'end of data'}`;
  // 1. The gate, on evidence that lies before the test months only: the walk-forward folds
  // whose test window ends at the split, and for spot the 2022 era scored with the fit before
  // the split. Timing skill and the sign do not depend on the confidence curve, so the gate is
  // decided before the curve's step size is chosen.
  interface Pending {
    kind: Kind;
    tf: Timeframe;
    perCoin: Sample[][];
    direction: 1 | -1;
    evidence: CellReport['evidence'];
    emit: boolean;
  }
  const pending: Pending[] = [];
  for (const kind of ['spot', 'perp'] as const) {
    for (const tf of ORDER) {
      const perCoin = sets[kind].get(tf);
      if (!perCoin) continue;
      const atSplit = fitCell(perCoin, tf, split, settings);
      if (!atSplit) continue;
      for (const series of perCoin) if (series[0]) trainFrom = Math.min(trainFrom, series[0].closeTime);
      const evidence: CellReport['evidence'] = [];
      for (const w of folds.gate) {
        const fit = fitCell(perCoin, tf, w.from, settings);
        if (!fit) continue;
        const score = scoreCalls(testPoints(perCoin, tf, settings.horizon, w.from, w.to), fit, settings);
        const agrees = fit.direction === atSplit.direction;
        evidence.push({ label: foldLabel(w), score, agrees, pass: agrees && showsSkill(score) });
      }
      const eraSeries = kind === 'spot' ? era.get(tf) : undefined;
      if (eraSeries) {
        const score = scoreCalls(testPoints(eraSeries, tf, settings.horizon, 0, split), atSplit, settings);
        evidence.push({
          label: 'era 2022 (fit before the split)',
          score,
          agrees: true,
          pass: showsSkill(score),
        });
      }
      const emit = gateEmits(evidence);
      pending.push({ kind, tf, perCoin, direction: atSplit.direction, evidence, emit });
    }
  }
  // 2. The confidence curve's step size, chosen on inner folds of the training months, on the
  // cells that emit (the only ones whose confidence is served); on every cell when none does.
  const emitting = pending.filter((p) => p.emit);
  curveChoice = chooseStepShare(
    (emitting.length > 0 ? emitting : pending).map((p) => ({
      cell: `${p.kind}:${p.tf}`,
      timeframe: p.tf,
      perCoin: p.perCoin,
    })),
    monthStarts(gateSplits[0] ?? split, split),
    split,
    settings,
  );
  const stepShare = curveChoice.stepShare;
  log(`confidence curve step share ${stepShare} (inner folds)`);
  // 3. The shipped fit, then the out-of-sample scores: the folds from the split on (confirmation
  // only: the gate is already decided), the test months, the later fold and the 2022 era.
  for (const p of pending) {
    const { kind, tf, perCoin } = p;
    const shipped = fitCell(perCoin, tf, split, settings, stepShare)!;
    if (kind === 'spot') curves[tf] = shipped.curve;
    const confirmation: CellReport['confirmation'] = [];
    let later: CallScore | null = null;
    for (const w of folds.confirmation) {
      const fit = w.from === split ? shipped : fitCell(perCoin, tf, w.from, settings, stepShare);
      if (!fit) continue;
      const score = scoreCalls(testPoints(perCoin, tf, settings.horizon, w.from, w.to), fit, settings);
      const agrees = fit.direction === shipped.direction;
      confirmation.push({ label: foldLabel(w), score, agrees, pass: agrees && showsSkill(score) });
    }
    // The later fold's own table: its fit tested on everything after it.
    for (const x of extraSplits) {
      const fit = fitCell(perCoin, tf, x, settings, stepShare);
      if (fit)
        later = scoreCalls(
          testPoints(perCoin, tf, settings.horizon, x, Number.POSITIVE_INFINITY),
          fit,
          settings,
        );
    }
    const eraSeries = kind === 'spot' ? era.get(tf) : undefined;
    const eraScore = eraSeries
      ? scoreCalls(testPoints(eraSeries, tf, settings.horizon, 0, split), shipped, settings)
      : null;
    cells[`${kind}:${tf}`] = {
      emit: p.emit,
      direction: shipped.direction,
      curve: shipped.curve,
      evidence: p.evidence.map(describe),
    };
    const test = scoreCalls(
      testPoints(perCoin, tf, settings.horizon, split, Number.POSITIVE_INFINITY),
      shipped,
      settings,
    );
    cellReports.push({
      kind,
      timeframe: tf,
      emit: p.emit,
      direction: shipped.direction,
      evidence: p.evidence,
      confirmation,
      test,
      later,
      era: eraScore,
    });
    log(`cell ${kind}:${tf} ${p.emit ? 'EMITS' : 'holds'} (${shipped.direction === 1 ? 'follow' : 'fade'})`);
  }
  table = CalibrationTableSchema.parse({
    version: 1,
    method: 'isotonic-pav',
    engineVersion: ENGINE_VERSION,
    horizonCandles: settings.horizon,
    feeBps: settings.feeBps,
    holdBand: settings.holdBand,
    trainFrom: Number.isFinite(trainFrom) ? trainFrom : split,
    trainTo: split,
    fittedAt: new Date().toISOString(),
    curves,
    fallback: { '1m': '5m', '3m': '5m' },
    cells,
  });
  const models: VolatilityTable['models'] = {};
  for (const tf of ORDER) {
    const perCoin = spot.get(tf);
    const model = perCoin && fitVolatility(perCoin, tf, split, settings.horizon, BAND_COVERAGE);
    if (model) models[tf] = model;
  }
  volTable = VolatilityTableSchema.parse({
    version: 1,
    method: 'har-ewma-log',
    horizonCandles: settings.horizon,
    halfLives: [...VOL_HALF_LIVES],
    bandCoverage: BAND_COVERAGE,
    trainTo: split,
    fittedAt: new Date().toISOString(),
    models,
    fallback: { '1m': '5m', '3m': '5m' },
  });
} else {
  table = parseCalibrationTable(JSON.parse(await readFile(values.table, 'utf8')));
  volTable = parseVolatilityTable(JSON.parse(await readFile(values['vol-table'], 'utf8')));
  const from = values.from ? day(values.from) : table.trainTo;
  for (const kind of ['spot', 'perp'] as const) {
    for (const tf of ORDER) {
      const entry = table.cells[`${kind}:${tf}`];
      const perCoin = sets[kind].get(tf);
      if (!entry || !perCoin) continue;
      const fit: CellFit = { direction: entry.direction, curve: entry.curve };
      const eraSeries = kind === 'spot' ? era.get(tf) : undefined;
      cellReports.push({
        kind,
        timeframe: tf,
        emit: entry.emit,
        direction: entry.direction,
        evidence: [],
        confirmation: [],
        test: scoreCalls(
          testPoints(perCoin, tf, settings.horizon, from, Number.POSITIVE_INFINITY),
          fit,
          settings,
        ),
        later: null,
        era: eraSeries
          ? scoreCalls(testPoints(eraSeries, tf, settings.horizon, 0, split), fit, settings)
          : null,
      });
    }
  }
}

const volReports: VolReport[] = [];
const volFrom = scoreOnly && values.from ? day(values.from) : volTable.trainTo;
for (const [kind, set] of [
  ['spot', spot],
  ['perp', perp],
  ['era 2022', era],
] as const) {
  for (const tf of ORDER) {
    const perCoin = set.get(tf);
    const model = volTable.models[tf];
    if (!perCoin || !model) continue;
    const from = kind === 'era 2022' ? 0 : volFrom;
    const to = kind === 'era 2022' ? split : Number.POSITIVE_INFINITY;
    const sparse = testPoints(perCoin, tf, settings.horizon, from, to);
    if (sparse.length < 30) continue;
    // Scored on every closed candle, blocks one horizon long (see scoreVolatility); the old
    // one-point-per-horizon coverage is kept beside it.
    const every = testPoints(perCoin, tf, 1, from, to);
    volReports.push({
      kind,
      timeframe: tf,
      score: scoreVolatility(every, model, volTable.bandCoverage, settings.horizon * TIMEFRAME_MS[tf]),
      sparseCoverage: bandCoverage(sparse, model),
      sparsePoints: sparse.length,
    });
  }
}
log('volatility scored');

// ---- funding carry ----
let carry: CarryEvaluation | null = null;
const history = await loadFundingHistory(values.data);
if (history.coins === 0) {
  log(`skipped funding: no funding/{binance,bybit,hyperliquid} files under ${values.data}`);
} else {
  let halfLife: CarryEvaluation['halfLife'] = null;
  let carryTable: CarryTable;
  if (scoreOnly) {
    carryTable = parseCarryTable(JSON.parse(await readFile(values['carry-table'], 'utf8')));
  } else {
    const fit = fitCarryTable(history, fundingSplit);
    carryTable = fit.table;
    halfLife = fit.choice;
  }
  const from = scoreOnly && values.from ? day(values.from) : carryTable.trainTo;
  carry = { ...evaluateCarry(history, carryTable, from), halfLife };
  if (!scoreOnly) await writeFile(values['carry-table'], `${JSON.stringify(carryTable, null, 2)}\n`);
  log(`funding carry scored on ${carry.opportunities} opportunities`);
}

const seconds = (performance.now() - started) / 1000;
if (!scoreOnly) {
  await writeFile(values.table, `${JSON.stringify(table, null, 2)}\n`);
  await writeFile(values['vol-table'], `${JSON.stringify(volTable, null, 2)}\n`);
  await writeFile(
    values.svg,
    reliabilitySvg(
      cellReports
        .filter((c) => c.kind === 'spot' && c.test !== null)
        .map((c) => ({
          title: `${c.timeframe} (${c.test!.calls.n} test calls${c.emit ? '' : ', HOLD in service'})`,
          bins: c.test!.reliability,
        })),
    ),
  );
}
await writeFile(
  reportPath,
  renderReport({
    scoreOnly,
    table,
    volTable,
    cells: cellReports,
    vol: volReports,
    carry,
    dataDir: values.data,
    seconds,
    settings,
    gateSplits,
    extraSplits,
    curveChoice,
    from: scoreOnly && values.from ? day(values.from) : table.trainTo,
    svgPath: relative('docs', values.svg),
    subsample:
      maxCoins > 0 ? `Subsampled: first ${maxCoins} coins per folder.` : 'All coins of those folders.',
  }),
);
log(
  `wrote ${scoreOnly ? '' : `${values.table}, ${values['vol-table']}, ${values['carry-table']}, `}${reportPath}`,
);
