import type { CalibrationTable } from '../../../contracts/signals.ts';
import type { Rate, TimeframeResult } from './walk-forward.ts';

/** Markdown report of an evaluation run; every sentence about results is computed from them. */

export interface Fold {
  split: number;
  results: TimeframeResult[];
}

export interface ReportInput {
  table: CalibrationTable;
  main: TimeframeResult[];
  era2022: TimeframeResult[];
  /** Later splits of the expanding window, each with a table refitted on everything before it. */
  folds: Fold[];
  dataDir: string;
  sources: string[];
  seconds: number;
  svgPath: string;
  subsample: string;
}

const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : '–');
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const stance = (r: TimeframeResult) => (r.direction === 1 ? 'follow' : 'fade');

function rateCell(r: Rate): string {
  if (r.n === 0) return '– (0)';
  return `${pct(r.rate)} [${pct(r.ci.low)}–${pct(r.ci.high)}] (${r.n})`;
}

function bestBaseline(r: TimeframeResult): number {
  return Math.max(r.alwaysBuy.rate, r.alwaysSell.rate, r.randomSameRate);
}

const beats = (r: TimeframeResult) => r.calls.n > 0 && r.calls.ci.low > bestBaseline(r);
const loses = (r: TimeframeResult) => r.calls.n > 0 && r.calls.ci.high < bestBaseline(r);
/** Top training step hit more often than the calls below it on unseen data, intervals apart. */
const separates = (r: TimeframeResult) =>
  r.topStep !== null && r.topStep.top.n > 0 && r.topStep.top.ci.low > r.topStep.below.ci.high;
const topHigher = (r: TimeframeResult) =>
  r.topStep !== null && r.topStep.top.n > 0 && r.topStep.top.rate > r.topStep.below.rate;

function resultTable(rows: TimeframeResult[]): string[] {
  const out = [
    '| tf | calls | test points | HOLD | BUY hit [95% CI] (n) | SELL hit [95% CI] (n) | all calls hit [95% CI] (n) | always-BUY | always-SELL | random, same mix | Brier (base-rate Brier) |',
    '|---|---|---:|---:|---|---|---|---:|---:|---:|---|',
  ];
  for (const r of rows) {
    out.push(
      `| ${r.timeframe} | ${stance(r)} | ${r.points} | ${pct(r.holdShare)} | ${rateCell(r.buy)} | ${rateCell(r.sell)} | ${rateCell(r.calls)} | ${pct(r.alwaysBuy.rate)} | ${pct(r.alwaysSell.rate)} | ${pct(r.randomSameRate)} | ${r.brier.toFixed(4)} (${r.brierBaseRate.toFixed(4)}) |`,
    );
  }
  return out;
}

function topStepTable(rows: TimeframeResult[], label = (r: TimeframeResult) => r.timeframe): string[] {
  const out = [
    '| tf | top step (train): |score| > → p | test hit, top step [95% CI] (n) | test hit, below it [95% CI] (n) | separated? |',
    '|---|---|---|---|---|',
  ];
  for (const r of rows) {
    if (r.topStep === null) {
      out.push(`| ${label(r)} | flat curve: one step | – | ${rateCell(r.calls)} | no |`);
      continue;
    }
    const t = r.topStep;
    out.push(
      `| ${label(r)} | ${t.from.toFixed(3)} → ${pct(t.probability)} | ${rateCell(t.top)} | ${rateCell(t.below)} | ${separates(r) ? 'yes: intervals apart' : topHigher(r) ? 'higher, intervals overlap' : 'no'} |`,
    );
  }
  return out;
}

function verdictOnEdge(r: TimeframeResult): string {
  if (r.calls.n === 0) return `${r.timeframe}: no calls`;
  const best = bestBaseline(r);
  const lead = r.calls.rate - best;
  const judgement = beats(r)
    ? 'better: lower CI bound above it'
    : loses(r)
      ? 'worse: upper CI bound below it'
      : 'not distinguishable';
  return `${r.timeframe} (${stance(r)}): calls ${pct(r.calls.rate)} vs best baseline ${pct(best)} (${lead >= 0 ? '+' : ''}${(100 * lead).toFixed(1)} pts, ${judgement})`;
}

function bucketFinding(r: TimeframeResult): string {
  const mid = r.buckets.find((b) => b.label === '50–59')!.rate;
  const high = r.buckets.find((b) => b.label === '≥ 70')!.rate;
  if (high.n === 0) return `${r.timeframe}: no test call reached confidence 70 (50–59: ${rateCell(mid)})`;
  if (mid.n === 0) return `${r.timeframe}: ≥ 70 ${rateCell(high)}; no calls at 50–59 to compare`;
  const better = high.rate > mid.rate;
  return `${r.timeframe}: ≥ 70 ${rateCell(high)} vs 50–59 ${rateCell(mid)} → ${better ? 'higher' : 'NOT higher'}${better && high.ci.low > mid.ci.high ? ' (intervals separate)' : ''}`;
}

const list = (rs: TimeframeResult[]) => (rs.length === 0 ? 'none' : rs.map((r) => r.timeframe).join(', '));

function summary(input: ReportInput): string[] {
  const { main, era2022, folds } = input;
  const fade = main.filter((r) => r.direction === -1);
  const out = ['## Summary', ''];
  out.push(
    `- Direction fitted on the training months: fade the score on ${list(fade)}; follow it on ${list(main.filter((r) => r.direction === 1))}.`,
  );
  out.push(
    `- Test months (from ${day(input.table.trainTo)}): calls beat the best baseline with their whole 95 % interval on ${main.filter(beats).length} of ${main.length} timeframes (${list(main.filter(beats))}); significantly worse on ${list(main.filter(loses))}.`,
  );
  for (const f of folds) {
    out.push(
      `- Later fold (refit on everything before ${day(f.split)}, test after): beat the best baseline on ${f.results.filter(beats).length} of ${f.results.length} (${list(f.results.filter(beats))}); worse on ${list(f.results.filter(loses))}.`,
    );
  }
  if (era2022.length > 0) {
    out.push(
      `- 2022 era (a different market, never used for any choice): beat the best baseline on ${era2022.filter(beats).length} of ${era2022.length} (${list(era2022.filter(beats))}); worse on ${list(era2022.filter(loses))}.`,
    );
  }
  const reached70 = main.filter((r) => r.buckets[3]!.rate.n > 0);
  out.push(
    reached70.length === 0
      ? '- Confidence ≥ 70: no training step reached 70 %, so no test call carries it; the "≥ 70 vs 50–60" target cannot be met honestly with this score. Separation that does exist is measured below as top training step against the rest.'
      : `- Confidence ≥ 70 occurred on ${list(reached70)}; see the bucket table.`,
  );
  out.push(
    `- Top calibration step hit more often than the calls below it on test data on ${main.filter(topHigher).length} of ${main.length} timeframes, with separated 95 % intervals on ${main.filter(separates).length} (${list(main.filter(separates))}).`,
  );
  out.push('');
  return out;
}

function reading(input: ReportInput): string[] {
  const { main, table, folds, era2022 } = input;
  const flat = main.filter((r) => r.topStep === null);
  const below50 = Object.entries(table.curves)
    .filter(([, c]) => c.bins.every((b) => b.probability < 0.5))
    .map(([tf]) => tf);
  const skill = main.filter((r) => r.brier < r.brierBaseRate);
  const noSkill = main.filter((r) => r.brier > r.brierBaseRate);
  const sets = [main, ...folds.map((f) => f.results), ...(era2022.length > 0 ? [era2022] : [])];
  const inAll = (ok: (r: TimeframeResult) => boolean) =>
    main.filter((r) => sets.every((set) => set.some((x) => x.timeframe === r.timeframe && ok(x))));
  const topWorse = main.filter((r) => r.topStep !== null && r.topStep.top.n > 0 && !topHigher(r));
  const out = ['## Reading', ''];
  out.push(
    `- What the data say: over ${table.horizonCandles} candles the TradingView-style composite is a mean-reversion signal, not a trend signal. The training months favoured fading it on ${main.filter((r) => r.direction === -1).length} of ${main.length} timeframes. Fading is a sign flip of the same score: no indicator, threshold or weight was fitted.`,
  );
  out.push(
    `- Out of sample, the faded calls beat the best baseline with their whole interval in every out-of-sample set (test months${folds.length > 0 ? ', later fold' : ''}${era2022.length > 0 ? ', 2022' : ''}) on ${list(inAll(beats))}, and were never significantly worse than it on ${list(inAll((r) => !loses(r)))}. Elsewhere the sets disagree: significant wins in one set, losses or noise in another${era2022.some(loses) ? ` (2022 was significantly worse on ${list(era2022.filter(loses))})` : ''}.`,
  );
  out.push(
    `- The fee decides short timeframes: a ${table.feeBps} bps round trip against a ${table.horizonCandles}-candle move leaves every fitted step below 50 % on ${below50.join(', ') || 'no timeframe'}. There confidence correctly stays under 50: the call is better than always-BUY, always-SELL or a coin flip, but on average still loses to the fee.`,
  );
  out.push(
    `- Confidence: the top training step did hit more often than the calls below it on ${list(main.filter(topHigher))} (intervals apart on ${list(main.filter(separates))}); on ${list(topWorse)} it hit less often, so there the highest confidences do not rank calls. The Brier score is below the base-rate Brier on ${skill.length} of ${main.length} timeframes (${list(skill)}) and above it on ${list(noSkill)}; all differences are in the third or fourth decimal. ${flat.length > 0 ? `The curve is a single flat step on ${list(flat)}.` : 'Every curve has more than one step.'}`,
  );
  out.push(
    '- Regime conditioning was tried during design, on the training months only (direction and curve per regime label, fitted on the first part of training, checked on its last 2½ months), and did not validate consistently: it helped on some timeframes and lowered the hit rate on others (30m, 1h, 4h). In most regime labels, trending-up/down included, fading beat following on most timeframes, so the classic "follow in trends, fade in ranges" split is not what these months show. It is not used; the per-regime table reports test hit rates for information only, and a split chosen from it now would be tuned on the test months.',
  );
  out.push(
    `- HOLD band: the TradingView band of ${table.holdBand} was kept (about 9 % HOLD). Where no step reaches 50 %, the break-even table shows no |score| band at which calls pay on average; a stricter service could answer HOLD on those timeframes.`,
  );
  out.push(
    `- Limits: coins move together, so the Wilson intervals (which treat test points as independent) are too narrow; read a "separated" or "better" that only just clears the line with caution.${folds.length > 0 ? ' The later fold tests months that are also inside the main test window, so it checks stability of the fit, not fresh data.' : ''} Perpetual context (funding, basis) is wired into the score but spot files have none, so these figures are for the technical score alone. The later months the data set keeps back are the real test of this round.`,
  );
  out.push('');
  return out;
}

export function renderReport(input: ReportInput): string {
  const { table } = input;
  const lines: string[] = [];
  lines.push('# Signal evaluation');
  lines.push('');
  lines.push(
    `Generated by \`npm run evaluate\` (services/engine/evaluate/main.ts), engine \`${table.engineVersion}\`, in ${input.seconds.toFixed(0)} s. Data: \`${input.dataDir}\` (${input.sources.join('; ')}). ${input.subsample}`,
  );
  lines.push('');
  lines.push(...summary(input));
  lines.push('## Method (fixed before the test months were looked at)');
  lines.push('');
  lines.push(
    '- Every closed candle is fed once to the streaming engine (services/engine/signals); once the indicators are stable the composite score (TradingView-style MA/oscillator vote, [−1, 1]) is recorded. No perpetual context (funding, basis) is used here: the spot files have none.',
  );
  lines.push(
    `- Outcome: forward return from the close the verdict saw to the close **${table.horizonCandles} candles later**, on every timeframe. A BUY is right when that return exceeds the **${table.feeBps} bps** round-trip fee, a SELL when it is below −${table.feeBps} bps. No "touched the target at some point" rate is used anywhere.`,
  );
  lines.push(
    `- Direction (new in ${table.engineVersion}): per timeframe, the training calls (|score| ≥ ${table.holdBand}) are scored twice, following the score's sign and against it; the side that beat the fee more often is the call direction for that timeframe (a tie follows). One sign per timeframe, nothing finer.`,
  );
  lines.push(
    '- Calibration: isotonic regression (pool-adjacent-violators) of "the fitted direction beat the fee" on |score|, per timeframe, BUY and SELL pooled, steps merged until each holds ≥ max(100, 2 % of the training samples). Confidence = round(100 × fitted probability) = the training share of such calls that beat the fee. 1m and 3m have no data here and borrow the 5m curve.',
  );
  lines.push(
    `- Walk-forward: the shipped table is fitted on verdicts whose whole horizon ended before **${day(table.trainTo)}** (training from ${day(table.trainFrom)}); the main figures are from verdicts at or after that date. ${input.folds.length > 0 ? `A second expanding-window fold refits on everything before ${input.folds.map((f) => day(f.split)).join(', ')} and tests after it. ` : ''}The 2022 files are a different era used once, as a final check. The structure (direction per timeframe, no regime split) was chosen on the training months alone, by fitting on their first part and checking on their last 2½ months; horizon, fee, HOLD band (${table.holdBand}, TradingView's neutral band) and binning rule are unchanged from signals-1.`,
  );
  lines.push(
    `- Test points are non-overlapping: one verdict every ${table.horizonCandles} candles per coin, so consecutive outcomes of one coin share no candles. Coins still move together, so the Wilson intervals are somewhat too narrow.`,
  );
  lines.push(
    "- Baselines on the same points: always-BUY, always-SELL, and random BUY/SELL calls at the engine's own BUY:SELL mix (its expected hit rate). Brier score of the calls' calibrated probability against the outcome, next to the Brier score of always predicting the training base rate (lower is better; equal means no skill beyond the base rate).",
  );
  lines.push('');
  lines.push(`## Results on the test months (from ${day(table.trainTo)})`);
  lines.push('');
  lines.push(...resultTable(input.main));
  lines.push('');
  lines.push('### Edge against the baselines');
  lines.push('');
  for (const r of input.main) lines.push(`- ${verdictOnEdge(r)}`);
  lines.push('');
  lines.push('### Does confidence mean something?');
  lines.push('');
  lines.push(
    'Calls in the top step of the training curve against calls below it, on test months the table never saw:',
  );
  lines.push('');
  lines.push(...topStepTable(input.main));
  lines.push('');
  lines.push('Hit rate of test calls by confidence bucket (calibrated on training months only):');
  lines.push('');
  lines.push('| tf | < 50 | 50–59 | 60–69 | ≥ 70 |');
  lines.push('|---|---|---|---|---|');
  for (const r of [
    ...input.main,
    ...input.era2022.map((x) => ({ ...x, timeframe: `${x.timeframe} (2022)` as never })),
  ]) {
    lines.push(`| ${r.timeframe} | ${r.buckets.map((b) => rateCell(b.rate)).join(' | ')} |`);
  }
  lines.push('');
  for (const r of input.main) lines.push(`- ${bucketFinding(r)}`);
  lines.push('');
  lines.push(`![reliability diagram](${input.svgPath})`);
  lines.push('');
  lines.push(
    'Hit rate of test calls (in the fitted direction) by |score| band — a stronger score should be a better call:',
  );
  lines.push('');
  lines.push(`| tf | ${input.main[0]?.scoreBands.map((b) => b.label).join(' | ')} |`);
  lines.push(`|---|${input.main[0]?.scoreBands.map(() => '---').join('|')}|`);
  for (const r of input.main)
    lines.push(`| ${r.timeframe} | ${r.scoreBands.map((b) => rateCell(b.rate)).join(' | ')} |`);
  lines.push('');
  lines.push(
    'Hit rate of test calls by the regime the engine held at the call (information only; the direction is not conditioned on it):',
  );
  lines.push('');
  lines.push(`| tf | ${input.main[0]?.byRegime.map((b) => b.regime).join(' | ')} |`);
  lines.push(`|---|${input.main[0]?.byRegime.map(() => '---').join('|')}|`);
  for (const r of input.main)
    lines.push(`| ${r.timeframe} | ${r.byRegime.map((b) => rateCell(b.rate)).join(' | ')} |`);
  lines.push('');
  lines.push('### A HOLD band from the training fit');
  lines.push('');
  lines.push(
    'The smallest |score| whose fitted probability is ≥ 50 %, from the training curve, and the test hit rate of calls beyond it:',
  );
  lines.push('');
  lines.push('| tf | break-even |score| band (train) | test hit rate beyond it |');
  lines.push('|---|---:|---|');
  for (const r of input.main) {
    lines.push(
      `| ${r.timeframe} | ${r.breakEven === null ? 'none: no step reaches 50 %' : r.breakEven.band.toFixed(3)} | ${r.breakEven === null ? '–' : rateCell(r.breakEven.calls)} |`,
    );
  }
  lines.push('');
  for (const f of input.folds) {
    lines.push(`## Expanding-window fold: refit before ${day(f.split)}, test from ${day(f.split)}`);
    lines.push('');
    lines.push(...resultTable(f.results));
    lines.push('');
    lines.push(...topStepTable(f.results));
    lines.push('');
  }
  if (input.era2022.length > 0) {
    lines.push('## Another era: Binance spot 2022-01 → 2022-04 (includes the LUNA collapse)');
    lines.push('');
    lines.push(
      'The shipped table (fitted on 2024–2025 training months) applied to a different market era, all of it out of sample:',
    );
    lines.push('');
    lines.push(...resultTable(input.era2022));
    lines.push('');
    lines.push(...topStepTable(input.era2022));
    lines.push('');
  }
  lines.push(...reading(input));
  lines.push('## Calibration table shipped');
  lines.push('');
  lines.push(
    '`services/engine/signals/calibration/table.json`, loaded by the verdict code. Direction and steps per timeframe (|score| upper edge → probability, training samples):',
  );
  lines.push('');
  for (const [tf, curve] of Object.entries(table.curves)) {
    const steps = curve.bins.map(
      (b) => `≤${b.upTo.toFixed(3)}→${(100 * b.probability).toFixed(1)}% (${b.samples})`,
    );
    lines.push(
      `- ${tf} (${(curve.direction ?? 1) === 1 ? 'follow' : 'fade'}): base rate ${pct(curve.baseRate)} over ${curve.samples} samples; ${steps.join(', ')}`,
    );
  }
  lines.push('');
  return `${lines.join('\n')}\n`;
}
