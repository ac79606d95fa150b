import { spawnSync } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { basename, join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { aggregateCandles } from '../../../adapters/market/aggregate.ts';
import { MarketFileError } from '../../../adapters/market/csv.ts';
import { parseCandleFileName } from '../../../adapters/market/replay-layout.ts';
import { SHARED_MARKET_DIR } from '../../../adapters/market/shared-data.ts';
import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import {
  type BaselinesTable,
  BaselinesTableSchema,
  type CalibrationTable,
  CalibrationTableSchema,
  type VolatilityTable,
  VolatilityTableSchema,
} from '../../../contracts/signals.ts';
import { type CarryTable, parseCarryTable } from '../funding/carry.ts';
import { parseCalibrationTable } from '../signals/calibration.ts';
import { DEFAULT_HOLD_BAND, ENGINE_VERSION } from '../signals/verdict.ts';
import { parseVolatilityTable, VOL_HALF_LIVES } from '../signals/volatility.ts';
import { chooseFreeRule, compareWithFree, FREE_RULES, trainingPoints } from './baselines.ts';
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
  pays,
  pooledLeanMiss,
  pooledNet,
  type Settings,
  scoreCalls,
  scoreVolatility,
  showsSkill,
  testPoints,
} from './cells.ts';
import { chooseStepShare, monthStarts, type StepShareChoice } from './curve-choice.ts';
import { dataStart, folderProblem, readCandles } from './data-folder.ts';
import { type CarryEvaluation, evaluateCarry, fitCarryTable, loadFundingHistory } from './funding.ts';
import { type CellReport, type LabelReport, renderReport, type VolReport } from './report.ts';
import { fitFreeLabelCuts, labelEvidence } from './risk.ts';
import {
  type DeskResult,
  deskBaselineRows,
  RISK_ROWS_SUFFIX,
  renderRiskDesk,
  renderRiskDeskRows,
  riskDesk,
} from './risk-desk-run.ts';
import type { Estimate } from './stats.ts';
import { reliabilitySvg } from './svg.ts';
import { calibrationTable, collectSamples, type Sample } from './walk-forward.ts';

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
const DEFAULT_BASELINES = 'services/engine/signals/calibration/baselines.json';
/** A data folder as every reader can find it: relative to the checkout when it can be. */
const dataLabel = (dir: string) => relative(process.cwd(), dir) || '.';

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
  /** With --score-only: write the baselines file alone (no volatility table, carry or report). */
  'baselines-only': { type: 'boolean', default: false },
  /** The risk desk alone: the risk models and their baselines, nothing else (a minute, not half an hour). */
  'risk-only': { type: 'boolean', default: false },
  /**
   * A folder of earlier candles in the same layout, read before each coin's first candle in
   * --data (warm-up only, never scored); scores then start at --data's first day unless --from.
   */
  warmup: { type: 'string' },
  /** With --risk-only: score closes before this date only (an inner fold of the training months). */
  until: { type: 'string' },
  from: { type: 'string' },
  table: { type: 'string', default: 'services/engine/signals/calibration/table.json' },
  'vol-table': { type: 'string', default: 'services/engine/signals/calibration/volatility.json' },
  'carry-table': { type: 'string', default: 'services/engine/funding/carry.json' },
  report: { type: 'string' },
  /** Free baselines beside the figures sold (written on a fit; with --score-only only when named). */
  baselines: { type: 'string' },
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
  --baselines-only      with --score-only and --baselines: score and write the free baselines alone
  --risk-only           the risk desk alone: fit (or with --score-only score) the risk forecast and its
                        EWMA, GARCH(1,1) and HAR-RV baselines; writes the volatility table's risk rows,
                        the baselines' risk rows and docs/evaluation-risk.md (--report FILE)
  --warmup DIR          a folder of earlier candles (same layout) read before each coin's first candle in
                        --data: indicators warm up on it, nothing of it is scored; --from defaults to
                        --data's first day (e.g. --data NEW_MONTHS --warmup ../shared/data/market)
  --until DATE          with --risk-only: score the closes before DATE only (default: to the end of the data)
  --from DATE           with --score-only: score from this date (default: the tables' training end)
  --table, --vol-table, --carry-table FILE   where the tables are read or written
  --baselines FILE      free-baseline figures for the track record (default services/engine/signals/calibration/baselines.json; with --score-only only when given)
  --report FILE         report path (default docs/evaluation.md, docs/evaluation-score-only.md with --score-only)
  --svg FILE            reliability diagram path (default docs/evaluation-reliability.svg)
`;

/** A mistyped option or value is the user's slip, not a crash: say which and show the options. */
function usageError(message: string): never {
  process.stderr.write(`${message}\n\n${USAGE}`);
  process.exit(2);
}

/** A folder or file the run cannot read: one line naming it, exit code 2, no stack trace. */
function inputError(message: string): never {
  process.stderr.write(`npm run evaluate: ${message}\n`);
  process.exit(2);
}
// A malformed market file (a bad row, a truncated gzip) names the file and line; its stack names
// only the reader.
process.on('uncaughtException', (err) => {
  if (err instanceof MarketFileError) inputError(err.message);
  process.stderr.write(`${err.stack ?? err}\n`);
  process.exit(1);
});

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

/**
 * A score-only run holds one timeframe's samples at a time (see the score-only branch below); V8
 * left alone grows its heap to 2.7 GB before collecting. It runs again under a heap limit that
 * keeps the process under 1 GB, unless NODE_OPTIONS names a limit of its own: on the full shared
 * data (its test months from 2025-06-01 and the 2022 era) 3:09 at 0.87 GB peak RSS, load 2.7–3.3;
 * four new months with their warm-up 0.94 GB with every timeframe held at once. So held, the
 * full data ran out of this heap (after 71–134 s at 0.90–0.91 GB RSS, or collecting for over
 * 10 min at load 7) and needed 1.4 GB (1.44 GB peak RSS, 5:45 at load 7.6–3.1). An out-of-memory
 * end names the flag that gives it more.
 */
const SCORE_ONLY_HEAP_MB = 600;
if (
  values['score-only'] &&
  !/--max-old-space-size/.test(process.env.NODE_OPTIONS ?? '') &&
  !process.execArgv.some((a) => a.startsWith('--max-old-space-size'))
) {
  const child = spawnSync(
    process.execPath,
    [`--max-old-space-size=${SCORE_ONLY_HEAP_MB}`, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: 'inherit' },
  );
  // V8 ends a process out of heap with SIGABRT: without a shell, spawnSync reports the signal
  // (status null; 134 is only a shell's exit code for it).
  if (child.signal === 'SIGABRT') {
    process.stderr.write(
      `npm run evaluate: --score-only ran out of its ${SCORE_ONLY_HEAP_MB} MB heap on ${values.data}; give it more with NODE_OPTIONS=--max-old-space-size=${2 * SCORE_ONLY_HEAP_MB}\n`,
    );
    process.exit(1);
  }
  process.exit(child.status ?? 1);
}

const started = performance.now();
const loadAtStart = loadavg()[0]!;
const log = (msg: string) =>
  process.stdout.write(`[${((performance.now() - started) / 1000).toFixed(1)}s] ${msg}\n`);
const day = (x: string) => Date.parse(`${x.trim()}T00:00:00Z`);
const dates = (x: string) =>
  x
    .split(',')
    .filter((s) => s.trim() !== '')
    .map(day);

if (values.until && !values['risk-only']) usageError('--until needs --risk-only');
// An inner fold (--until, or a split other than the default) must not overwrite the shipped tables.
if (
  values['risk-only'] &&
  !values['score-only'] &&
  (values.until || values.split !== OPTIONS.split.default) &&
  !(process.argv.includes('--vol-table') && process.argv.includes('--baselines'))
) {
  usageError(
    '--risk-only with --until or another --split writes a fold: name --vol-table and --baselines for it',
  );
}
if (values.warmup && !values['score-only'])
  usageError('--warmup needs --score-only (a fit reads every month it is given)');
for (const [dir, flag] of [
  [values.data, '--data'],
  ...(values.warmup ? [[values.warmup, '--warmup'] as const] : []),
] as const) {
  const problem = await folderProblem(dir, flag);
  if (problem) inputError(problem);
}
// With a warm-up folder the scores start where the data folder starts, unless --from says.
if (values.warmup && !values.from) {
  const start = await dataStart(values.data);
  if (start !== null)
    values.from = new Date(Math.ceil(start / 86_400_000) * 86_400_000).toISOString().slice(0, 10);
}
const scoreOnly = values['score-only'];
const baselinesOnly = values['baselines-only'];
if (baselinesOnly && !(scoreOnly && values.baselines)) {
  usageError('--baselines-only needs --score-only and --baselines');
}
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

// ---- the risk forecast against a risk desk's forecasters (its own candles, its own report) ----
/** The risk desk's report: --report with --risk-only, else beside the main report (…-risk.md). */
const riskReportPath =
  values['risk-only'] && values.report ? values.report : reportPath.replace(/(\.md)?$/, '-risk.md');
/** Its per-row CSV of band width, Winkler score, misses after misses and weekends, beside it. */
const riskRowsPath = riskReportPath.replace(/(\.md)?$/, RISK_ROWS_SUFFIX);
/** Where a score-only run's scores start: --from, else the training end of the table scored. */
const scoresStart = (trainTo: number) => (values.from ? day(values.from) : trainTo);
async function runRiskDesk(shippedVol: VolatilityTable | null): Promise<DeskResult> {
  const from = scoreOnly ? scoresStart(shippedVol?.trainTo ?? split) : split;
  // Scoring the shipped table, its band is judged at the coverage it was fitted for.
  const coverage = scoreOnly && shippedVol ? shippedVol.bandCoverage : BAND_COVERAGE;
  const result = await riskDesk({
    data: values.data,
    split,
    from,
    to: values.until ? day(values.until) : Number.POSITIVE_INFINITY,
    warmup: values.warmup,
    verdictHorizon: settings.horizon,
    coverage,
    maxCoins,
    ...(scoreOnly && shippedVol?.risk ? { shipped: shippedVol.risk } : {}),
    log,
  });
  await writeFile(
    riskReportPath,
    `# Risk forecast evaluation\n\nGenerated by \`npm run evaluate${scoreOnly ? ' -- --score-only' : ''}\` (services/engine/evaluate/risk-desk-run.ts). Data: \`${dataLabel(values.data)}\`. ${maxCoins > 0 ? `Subsampled: first ${maxCoins} coins per folder.` : 'All coins of those folders.'}\n\n${renderRiskDesk(
      result,
      {
        from: new Date(from).toISOString().slice(0, 10),
        coverage,
        fitted: scoreOnly
          ? `the shipped table, trained before ${new Date(shippedVol?.trainTo ?? split).toISOString().slice(0, 10)}`
          : `before ${values.split}`,
        rowsFile: basename(riskRowsPath),
      },
    )}`,
  );
  log(`wrote ${riskReportPath}`);
  await writeFile(riskRowsPath, renderRiskDeskRows(result));
  log(`wrote ${riskRowsPath}`);
  return result;
}

/** A baselines table, or null when the file is missing or not one. */
async function readBaselines(path: string): Promise<BaselinesTable | null> {
  try {
    return BaselinesTableSchema.parse(JSON.parse(await readFile(path, 'utf8')));
  } catch {
    return null;
  }
}

/**
 * The desk's models become the table's risk rows, and its verdict-horizon model the one a trade
 * call's `volatility` (and the regime's percentile) uses: one forecast per horizon, whichever
 * answer states it.
 */
function withRisk(table: VolatilityTable, desk: DeskResult): VolatilityTable {
  const models = { ...table.models };
  for (const [tf, rows] of Object.entries(desk.risk) as [
    Timeframe,
    NonNullable<VolatilityTable['risk']>[Timeframe],
  ][]) {
    const verdict = rows?.find((r) => r.key === 'verdict');
    if (verdict) models[tf] = verdict.model;
  }
  return VolatilityTableSchema.parse({ ...table, models, risk: desk.risk, trainTo: split });
}

if (values['risk-only']) {
  const shippedVol = parseVolatilityTable(JSON.parse(await readFile(values['vol-table'], 'utf8')));
  const desk = await runRiskDesk(scoreOnly ? shippedVol : null);
  if (!scoreOnly) {
    await writeFile(values['vol-table'], `${JSON.stringify(withRisk(shippedVol, desk), null, 2)}\n`);
  }
  const baselinesPath = values.baselines ?? (scoreOnly ? undefined : DEFAULT_BASELINES);
  if (baselinesPath) {
    const existing = await readBaselines(baselinesPath);
    if (existing) {
      await writeFile(
        baselinesPath,
        `${JSON.stringify(BaselinesTableSchema.parse({ ...existing, risk: deskBaselineRows(desk.rows) }), null, 2)}\n`,
      );
      log(`wrote the risk rows of ${baselinesPath}`);
    } else {
      log(`${baselinesPath} is missing or invalid: run the whole evaluation to write it`);
    }
  }
  process.exit(0);
}

type SampleSet = Map<Timeframe, Sample[][]>;

/**
 * The shipped tables a score-only run scores, read once, before any sample is collected; the free
 * rules come from the shipped baselines file, not --baselines (where this run writes its own figures).
 */
const json = async (path: string) => JSON.parse(await readFile(path, 'utf8'));
const shipped = scoreOnly
  ? {
      table: parseCalibrationTable(await json(values.table)),
      vol: parseVolatilityTable(await json(values['vol-table'])),
      baselines:
        (await readBaselines(DEFAULT_BASELINES)) ??
        usageError(`--score-only takes the free rules from ${DEFAULT_BASELINES}`),
    }
  : null;
/**
 * Where a score-only run's scores start: --from, else the shipped tables' training end. It keeps
 * the samples from 250 candles before it (the regime labels' free rank looks 200 back), and the
 * 2022 era's whole (scored whole). Kept from the first candle, the training months of the full
 * data held 1.75 GB at their peak and ran out of the 600 MB heap below.
 */
const keepSamplesFrom =
  shipped === null ? null : Math.min(scoresStart(shipped.table.trainTo), scoresStart(shipped.vol.trainTo));

/** The candle folders found missing (named once in the log). */
const skippedDirs = new Set<string>();
async function collect(
  folder: string,
  base: '5m' | '1h',
  targets: Timeframe[],
  into: SampleSet,
  /** Every sample kept, even in a score-only run (the 2022 era, scored whole). */
  whole = false,
): Promise<void> {
  const dir = join(values.data, 'candles', folder);
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch {
    // Once per folder: a score-only run collects one timeframe at a time, each reading it again.
    if (!skippedDirs.has(dir)) log(`skipped ${dir}: not in this data directory`);
    skippedDirs.add(dir);
    return;
  }
  let files = names
    .map((name) => ({ name, parsed: parseCandleFileName(name) }))
    .filter((f) => f.parsed?.timeframe === base);
  if (maxCoins > 0) files = files.slice(0, maxCoins);
  for (const [i, f] of files.entries()) {
    const source = await readCandles({ data: values.data, warmup: values.warmup }, folder, f.name);
    for (const tf of targets) {
      const series = tf === base ? source : aggregateCandles(source, base, tf);
      const list = into.get(tf) ?? [];
      const keepFrom =
        keepSamplesFrom !== null && !whole
          ? keepSamplesFrom - 250 * TIMEFRAME_MS[tf]
          : Number.NEGATIVE_INFINITY;
      list.push(collectSamples(series, tf, settings.horizon, keepFrom));
      into.set(tf, list);
    }
    log(`${folder} ${base} ${f.parsed!.coin} (${i + 1}/${files.length}): ${source.length} candles`);
  }
}

const spot: SampleSet = new Map();
const perp: SampleSet = new Map();
const era: SampleSet = new Map();
// ---- the risk forecast against a risk desk's forecasters (fitted now unless --score-only) ----
// First, on candles of its own: its memory is free again before the samples below are built.
const risk = await runRiskDesk(shipped?.vol ?? null);

/** The samples of these timeframes, every set's. */
async function collectAll(tfs: readonly Timeframe[]): Promise<void> {
  const from5m = FROM_5M.filter((tf) => tfs.includes(tf));
  const from1h = FROM_1H.filter((tf) => tfs.includes(tf));
  if (from5m.length > 0) await collect('binance-spot', '5m', from5m, spot);
  if (from1h.length > 0) {
    await collect('binance-spot', '1h', from1h, spot);
    await collect('binance-usdm', '1h', from1h, perp);
  }
  // The baselines file holds test-month figures only: the 2022 era is not needed for it.
  if (!baselinesOnly) {
    if (from5m.length > 0) await collect('binance-spot-2022', '5m', from5m, era, true);
    if (from1h.length > 0) await collect('binance-spot-2022', '1h', from1h, era, true);
  }
}
// A fit reads every timeframe at once (its choices pool cells); a score-only run collects and
// scores one timeframe at a time below.
if (!scoreOnly) await collectAll(ORDER);
const sets: Record<Kind, SampleSet> = { spot, perp };

let table: CalibrationTable;
let volTable: VolatilityTable;
const cellReports: CellReport[] = [];
const volReports: VolReport[] = [];
const labelReports: LabelReport[] = [];
let curveChoice: StepShareChoice | null = null;
/** Label evidence on the training months (what the shipped flags were decided on). */
const labelTraining = new Map<Timeframe, ReturnType<typeof labelEvidence>>();
const label = (ms: number) => new Date(ms).toISOString().slice(0, 10);

if (!scoreOnly) {
  const curves: CalibrationTable['curves'] = {};
  const cells: CalibrationTable['cells'] = {};
  let trainFrom = Number.POSITIVE_INFINITY;
  const folds = foldWindows(gateSplits, split, extraSplits);
  const describe = (e: CellReport['evidence'][number]) =>
    `${e.label}: skill ${(100 * e.score.skill.value).toFixed(2)} pts, one-sided 95% day-block bound ${(100 * e.score.skill.dayBlock.lowOneSided).toFixed(2)}${e.agrees ? '' : ', fitted sign differs'} → ${e.pass ? 'pass' : 'fail'}; net ${e.score.netBps.mean.toFixed(2)} bps per call, one-sided bound ${e.score.netBps.dayBlock.lowOneSided.toFixed(2)} → ${e.pays ? 'pays' : 'does not pay'}`;
  // A fold or era passes each gate only with the sign fitted on the training months.
  const judged = (label: string, score: CallScore, agrees: boolean): CellReport['evidence'][number] => ({
    label,
    score,
    agrees,
    pass: agrees && showsSkill(score),
    pays: agrees && pays(score),
  });
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
    timingSkill: boolean;
    net: CellReport['net'];
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
        evidence.push(judged(foldLabel(w), score, agrees));
      }
      const eraSeries = kind === 'spot' ? era.get(tf) : undefined;
      if (eraSeries) {
        const score = scoreCalls(testPoints(eraSeries, tf, settings.horizon, 0, split), atSplit, settings);
        evidence.push(judged('era 2022 (fit before the split)', score, true));
      }
      // Two gates, both on every fold and era before the test months: timing skill over random
      // calls at the same mix, and following the calls beating the fee (net bound above 0).
      const timingSkill = gateEmits(evidence);
      const net = pooledNet(evidence.map((e) => e.score));
      const emit = timingSkill && evidence.every((e) => e.pays);
      pending.push({ kind, tf, perCoin, direction: atSplit.direction, evidence, timingSkill, net, emit });
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
      confirmation.push(judged(foldLabel(w), score, agrees));
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
    // HOLD's confidence claims the share of leans that did not beat the fee: measured out of fold
    // on the gate's folds and eras (on an emitting cell, only the leans inside the HOLD band).
    const miss = pooledLeanMiss(
      p.evidence.map((e) => e.score),
      p.emit,
    );
    const finite = (x: number) => (Number.isFinite(x) ? x : null);
    cells[`${kind}:${tf}`] = {
      emit: p.emit,
      direction: shipped.direction,
      curve: shipped.curve,
      evidence: p.evidence.map(describe),
      timingSkill: p.timingSkill,
      net: { meanBps: finite(p.net.meanBps), lowBps: finite(p.net.lowBps), calls: p.net.calls },
      ...(miss.n > 0 ? { hold: { probability: miss.missed / miss.n, samples: miss.n } } : {}),
    };
    const testSet = testPoints(perCoin, tf, settings.horizon, split, Number.POSITIVE_INFINITY);
    const test = scoreCalls(testSet, shipped, settings);
    // The best free rule, chosen on the training months, beside the cell on the test months.
    const rule = chooseFreeRule(trainingPoints(perCoin, tf, settings.horizon, split), settings);
    const free = {
      test: compareWithFree(testSet, shipped, rule, settings),
      era: eraSeries
        ? compareWithFree(testPoints(eraSeries, tf, settings.horizon, 0, split), shipped, rule, settings)
        : null,
    };
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
      timingSkill: p.timingSkill,
      net: p.net,
      hold: cells[`${kind}:${tf}`]!.hold ?? null,
      free,
    });
    log(`cell ${kind}:${tf} ${p.emit ? 'EMITS' : 'holds'} (${shipped.direction === 1 ? 'follow' : 'fade'})`);
  }
  table = CalibrationTableSchema.parse(
    calibrationTable({ ...settings, split }, trainFrom, {
      curves,
      fallback: { '1m': '5m', '3m': '5m' },
      cells,
    }),
  );
  const models: VolatilityTable['models'] = {};
  for (const tf of ORDER) {
    const perCoin = spot.get(tf);
    const model = perCoin && fitVolatility(perCoin, tf, split, settings.horizon, BAND_COVERAGE);
    if (model) models[tf] = model;
  }
  const labels: NonNullable<VolatilityTable['labels']> = {};
  for (const tf of ORDER) {
    const perCoin = spot.get(tf);
    if (!perCoin) continue;
    // Whether the labels add information is decided on the training months only.
    const cuts = fitFreeLabelCuts(perCoin, tf, settings.horizon, split);
    if (cuts) {
      const e = labelEvidence(perCoin, tf, settings.horizon, 0, split, cuts);
      const finite = (x: number) => (Number.isFinite(x) ? x : null);
      labels[tf] = {
        volatilityLabelAddsInformation: e.gain.dayBlock.lowOneSided > 0,
        rhoEngine: finite(e.rhoEngine),
        rhoFree: finite(e.rhoFree),
        trendLabelsInformative: e.trending.diff.dayBlock.low > 0 || e.trending.diff.dayBlock.high < 0,
        upMinusDownBps: finite(e.trending.diff.value),
        freeCuts: cuts,
      };
      labelTraining.set(tf, e);
    }
    log(`label evidence ${tf}`);
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
    labels,
  });
} else {
  const shippedBaselines = shipped!.baselines;
  table = shipped!.table;
  volTable = shipped!.vol;
  const from = scoresStart(table.trainTo);
  /**
   * One timeframe's samples at a time, dropped once scored: held for every timeframe together, the
   * full data's test months and 2022 era needed a 1.4 GB heap (1.44 GB peak RSS), 0.87 GB this way.
   */
  for (const scored of ORDER) {
    await collectAll([scored]);
    scoreShippedCells(scored);
    scoreVolatilityOf([scored]);
    scoreLabelsOf([scored]);
    spot.clear();
    perp.clear();
    era.clear();
  }
  // In the order a fit reports them: set, then timeframe.
  const rank = (kind: string, tf: Timeframe) =>
    ['spot', 'perp', 'era 2022'].indexOf(kind) * ORDER.length + ORDER.indexOf(tf);
  cellReports.sort((a, b) => rank(a.kind, a.timeframe) - rank(b.kind, b.timeframe));
  volReports.sort((a, b) => rank(a.kind, a.timeframe) - rank(b.kind, b.timeframe));
  labelReports.sort((a, b) => rank(a.kind, a.timeframe) - rank(b.kind, b.timeframe));

  function scoreShippedCells(scored: Timeframe): void {
    for (const kind of ['spot', 'perp'] as const) {
      for (const tf of [scored]) {
        const entry = table.cells[`${kind}:${tf}`];
        const perCoin = sets[kind].get(tf);
        if (!entry || !perCoin) continue;
        const fit: CellFit = { direction: entry.direction, curve: entry.curve };
        const eraSeries = kind === 'spot' ? era.get(tf) : undefined;
        const testSet = testPoints(perCoin, tf, settings.horizon, from, Number.POSITIVE_INFINITY);
        // The free rule the shipped baselines chose on the training months (samples before the
        // scores' start are not kept); a cell they lack has no free comparison.
        const shippedRule = shippedBaselines.cells.find((c) => c.cell === `${kind}:${tf}`)?.bestFreeRule;
        const rule = FREE_RULES.find((r) => r.name === shippedRule) ?? null;
        cellReports.push({
          kind,
          timeframe: tf,
          emit: entry.emit,
          direction: entry.direction,
          evidence: [],
          confirmation: [],
          test: scoreCalls(testSet, fit, settings),
          later: null,
          era: eraSeries
            ? scoreCalls(testPoints(eraSeries, tf, settings.horizon, 0, split), fit, settings)
            : null,
          timingSkill: entry.timingSkill ?? entry.emit,
          net: {
            meanBps: entry.net?.meanBps ?? Number.NaN,
            lowBps: entry.net?.lowBps ?? Number.NaN,
            calls: entry.net?.calls ?? 0,
          },
          hold: entry.hold ?? null,
          free: rule ? { test: compareWithFree(testSet, fit, rule, settings), era: null } : null,
        });
      }
    }
  }
}

if (!scoreOnly) {
  volTable = withRisk(volTable, risk);
  scoreVolatilityOf(ORDER);
  scoreLabelsOf(ORDER);
}
log('volatility and labels scored');

/** Where the volatility forecast and the labels are scored from. */
function volFrom(): number {
  return scoreOnly && values.from ? day(values.from) : volTable.trainTo;
}

function scoreVolatilityOf(tfs: readonly Timeframe[]): void {
  for (const [kind, set] of baselinesOnly
    ? []
    : ([
        ['spot', spot],
        ['perp', perp],
        ['era 2022', era],
      ] as const)) {
    for (const tf of tfs) {
      const perCoin = set.get(tf);
      const model = volTable.models[tf];
      if (!perCoin || !model) continue;
      const from = kind === 'era 2022' ? 0 : volFrom();
      const to = kind === 'era 2022' ? split : Number.POSITIVE_INFINITY;
      const sparse = testPoints(perCoin, tf, settings.horizon, from, to);
      if (sparse.length < 30) continue;
      // Scored on every closed candle, blocks one horizon long (see scoreVolatility); the old
      // one-point-per-horizon coverage is kept beside it.
      const every = testPoints(perCoin, tf, 1, from, to);
      volReports.push({
        kind,
        timeframe: tf,
        score: scoreVolatility(
          every,
          model,
          volTable.bandCoverage,
          settings.horizon * TIMEFRAME_MS[tf],
          kind === 'perp',
        ),
        sparseCoverage: bandCoverage(sparse, model, kind === 'perp'),
        sparsePoints: sparse.length,
      });
    }
  }
}

// ---- the regime labels, against free labels ----
function scoreLabelsOf(tfs: readonly Timeframe[]): void {
  for (const [kind, set] of [
    ['spot', spot],
    ['perp', perp],
    ['era 2022', era],
  ] as const) {
    for (const tf of tfs) {
      const perCoin = set.get(tf);
      if (!perCoin) continue;
      const from = kind === 'era 2022' ? 0 : volFrom();
      const to = kind === 'era 2022' ? split : Number.POSITIVE_INFINITY;
      if (testPoints(perCoin, tf, 1, from, to).length < 200) continue;
      const cuts = volTable.labels?.[tf]?.freeCuts;
      if (cuts) {
        labelReports.push({
          kind,
          timeframe: tf,
          test: labelEvidence(perCoin, tf, settings.horizon, from, to, cuts),
          training: kind === 'spot' ? (labelTraining.get(tf) ?? null) : null,
          shipped: volTable.labels![tf]!,
        });
      }
    }
  }
}

// ---- funding carry ----
let carry: CarryEvaluation | null = null;
// Read through the relative folder: the files a report names as left out are named as every reader finds them.
const history = baselinesOnly ? null : await loadFundingHistory(dataLabel(values.data));
if (history === null) {
  log('skipped funding: --baselines-only');
} else if (history.coins === 0) {
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

const baselinesPath =
  values.baselines ?? (scoreOnly ? null : 'services/engine/signals/calibration/baselines.json');
if (baselinesPath !== null) {
  await writeFile(baselinesPath, `${JSON.stringify(baselinesOf(), null, 2)}\n`);
  log(`wrote ${baselinesPath}`);
}

function baselinesOf(): BaselinesTable {
  const f = (x: number, d = 2) => (Number.isFinite(x) ? Number(x.toFixed(d)) : null);
  const lift = (x: Estimate, d = 2) => ({
    value: f(x.value, d),
    low: f(x.dayBlock.low, d),
    high: f(x.dayBlock.high, d),
  });
  const pts = (x: number) => f(100 * x);
  const ptsLift = (x: Estimate) => ({
    value: pts(x.value),
    low: pts(x.dayBlock.low),
    high: pts(x.dayBlock.high),
  });
  return BaselinesTableSchema.parse({
    version: 1,
    engineVersion: ENGINE_VERSION,
    testFrom: scoreOnly && values.from ? day(values.from) : table.trainTo,
    feeBps: settings.feeBps,
    horizonCandles: settings.horizon,
    generatedAt: new Date().toISOString(),
    cells: cellReports
      .filter((c) => c.free !== null)
      .map((c) => {
        const t = c.free!.test;
        return {
          cell: `${c.kind}:${c.timeframe}`,
          emits: c.emit,
          serviceNetBpsPerAnswer: c.emit ? f(t.service.netBps) : 0,
          wouldBeNetBpsPerCall: f(t.service.netBps),
          alwaysHoldNetBps: 0,
          bestFreeRule: t.rule.name,
          freeNetBpsPerCall: f(t.free.netBps),
          liftNetBps: lift(t.liftNetBps),
          wouldBeSkillPts: pts(t.service.skill),
          freeSkillPts: pts(t.free.skill),
          liftSkillPts: ptsLift(t.liftSkill),
        };
      }),
    risk: deskBaselineRows(risk.rows),
    labels: labelReports
      .filter((r) => r.kind !== 'era 2022')
      .map((r) => ({
        set: r.kind,
        timeframe: r.timeframe,
        rankCorrelation: f(r.test.rhoEngine, 3),
        freeRankCorrelation: f(r.test.rhoFree, 3),
        gain: lift(r.test.gain, 3),
        trendUpMinusDownBps: lift(r.test.trending.diff, 1),
      })),
  });
}

const seconds = (performance.now() - started) / 1000;
if (baselinesOnly) process.exit(0);
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
    risk,
    labels: labelReports,
    carry,
    dataDir: dataLabel(values.data),
    seconds,
    load: { start: loadAtStart, end: loadavg()[0]!, peakRssGb: process.resourceUsage().maxRSS / 1e6 },
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
