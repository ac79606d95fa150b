import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { MarketFileError, readFundingFile } from '../../../adapters/market/csv.ts';
import {
  firstAfter,
  HOUR_MS,
  mergeFundingSources,
  roundToMinute,
} from '../../../adapters/market/funding-series.ts';
import { FUNDING_FOLDERS, parseFundingFileName } from '../../../adapters/market/replay-layout.ts';
import type { Exchange, FundingRate } from '../../../contracts/market.ts';
import {
  CARRY_HORIZONS_HOURS,
  type CarryTable,
  CarryTableSchema,
  carryFigures,
  roundTripFeeBps,
} from '../funding/carry.ts';
import { isFresh } from '../funding-arb.ts';
import { byDay, dayBlockInterval, ratioOfSums } from './bootstrap.ts';
import type { Estimate, Interval } from './stats.ts';

/**
 * Funding carry, measured: opportunities are sampled from the funding history exactly as the
 * scan would see them (latest settled rate per venue, fresh only, hourly-normalised, widest
 * pair), and the carry actually collected afterwards is the sum of the settlements each leg
 * received or paid. The decay of the spread is fitted on the training months only.
 */

const SAMPLE_EVERY_HOURS = 8;
/** Lower edges of the spread buckets in bps per 8 h; the first is the smallest spread modelled. */
const BUCKET_EDGES_BPS = [0.5, 2, 5, 10, 25];

export interface FundingHistory {
  series: Map<string, Map<Exchange, FundingRate[]>>;
  /** Coins with funding on at least two venues. */
  coins: number;
  /** Files left out because they cannot be read as funding (reported, not guessed around). */
  skipped: string[];
}

export async function loadFundingHistory(dataDir: string): Promise<FundingHistory> {
  const raw = new Map<string, Map<Exchange, { rank: number; rows: FundingRate[] }[]>>();
  const skipped: string[] = [];
  for (const [folder, { exchange, rank, quote }] of Object.entries(FUNDING_FOLDERS)) {
    let names: string[];
    try {
      names = (await readdir(join(dataDir, 'funding', folder))).sort();
    } catch {
      continue;
    }
    for (const name of names) {
      const parsed = parseFundingFileName(name, quote);
      if (!parsed) continue;
      let rows: FundingRate[];
      try {
        rows = await readFundingFile(join(dataDir, 'funding', folder, name));
      } catch (err) {
        if (!(err instanceof MarketFileError)) throw err;
        skipped.push(err.message);
        continue;
      }
      const perVenue = raw.get(parsed.coin) ?? new Map();
      const list = perVenue.get(exchange) ?? [];
      list.push({ rank, rows });
      perVenue.set(exchange, list);
      raw.set(parsed.coin, perVenue);
    }
  }
  const series = new Map<string, Map<Exchange, FundingRate[]>>();
  for (const [coin, perVenue] of raw) {
    if (perVenue.size < 2) continue;
    const merged = new Map<Exchange, FundingRate[]>();
    for (const [exchange, sources] of perVenue) {
      merged.set(
        exchange,
        mergeFundingSources(sources.sort((a, b) => a.rank - b.rank).map((s) => s.rows)).map((r) => ({
          ...r,
          fundingTime: roundToMinute(r.fundingTime),
        })),
      );
    }
    series.set(coin, merged);
  }
  return { series, coins: series.size, skipped };
}

export interface Opportunity {
  coin: string;
  t: number;
  longVenue: Exchange;
  shortVenue: Exchange;
  spreadBpsPerHour: number;
  /** Carry collected by horizon (bps of one leg's notional); undefined past the data. */
  realised: Map<number, number>;
}

function collected(series: readonly FundingRate[], from: number, to: number): number {
  let sum = 0;
  for (let i = firstAfter(series, from); i < series.length && series[i]!.fundingTime <= to; i++) {
    sum += series[i]!.rate;
  }
  return sum;
}

/** Every SAMPLE_EVERY_HOURS, per coin, the pair the scan would show and what it then collected. */
function sampleOpportunities(history: FundingHistory): Opportunity[] {
  const out: Opportunity[] = [];
  const step = SAMPLE_EVERY_HOURS * HOUR_MS;
  for (const [coin, venues] of history.series) {
    let start = Number.POSITIVE_INFINITY;
    let end = Number.NEGATIVE_INFINITY;
    for (const s of venues.values()) {
      if (s.length === 0) continue;
      start = Math.min(start, s[0]!.fundingTime);
      end = Math.max(end, s[s.length - 1]!.fundingTime);
    }
    for (let t = Math.ceil(start / step) * step; t <= end; t += step) {
      const rows: { exchange: Exchange; hourly: number; last: number }[] = [];
      for (const [exchange, s] of venues) {
        const i = firstAfter(s, t) - 1;
        const latest = s[i];
        if (latest === undefined || !isFresh(latest, t)) continue;
        rows.push({
          exchange,
          hourly: latest.rate / latest.intervalHours,
          last: s[s.length - 1]!.fundingTime,
        });
      }
      if (rows.length < 2) continue;
      rows.sort((a, b) => a.hourly - b.hourly || a.exchange.localeCompare(b.exchange));
      const long = rows[0]!;
      const short = rows[rows.length - 1]!;
      const realised = new Map<number, number>();
      for (const h of CARRY_HORIZONS_HOURS) {
        const to = t + h * HOUR_MS;
        if (long.last < to || short.last < to) continue;
        const carry =
          collected(venues.get(short.exchange)!, t, to) - collected(venues.get(long.exchange)!, t, to);
        realised.set(h, carry * 10_000);
      }
      out.push({
        coin,
        t,
        longVenue: long.exchange,
        shortVenue: short.exchange,
        spreadBpsPerHour: (short.hourly - long.hourly) * 10_000,
        realised,
      });
    }
  }
  return out;
}

/**
 * Half-lives (days) the retention fit may weight training opportunities by; null = unweighted.
 * Spreads decayed differently from one month to the next (much slower in the first training
 * months than later), so a fit that weights old months as much as recent ones overstated the
 * carry of the test months. Which half-life is used is chosen on the training months alone.
 */
const HALF_LIFE_CANDIDATES_DAYS: readonly (number | null)[] = [7, 14, 30, 60, 120, null];
/** Inner walk-forward folds for that choice: the first days of the last this many months before the split. */
const INNER_FOLDS = 3;

export interface CarryFitOptions {
  /** Use this half-life instead of choosing one by inner walk-forward (null = unweighted). */
  halfLifeDays?: number | null;
}

/** Month starts (UTC) of the last `n` months before `split`, ascending. */
function innerFoldStarts(split: number, n: number): number[] {
  const d = new Date(split);
  const out: number[] = [];
  for (let k = n; k >= 1; k--) {
    const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - k + (d.getUTCDate() > 1 ? 1 : 0), 1);
    if (start < split) out.push(start);
  }
  return out;
}

function fitBuckets(opps: readonly Opportunity[], split: number, halfLifeDays: number | null) {
  let trainFrom = Number.POSITIVE_INFINITY;
  const buckets = BUCKET_EDGES_BPS.map((fromBps, i) => {
    const toBps = BUCKET_EDGES_BPS[i + 1] ?? Number.POSITIVE_INFINITY;
    const inBucket = opps.filter((o) => o.spreadBpsPerHour * 8 >= fromBps && o.spreadBpsPerHour * 8 < toBps);
    const horizons = CARRY_HORIZONS_HOURS.map((hours) => {
      let naive = 0;
      let real = 0;
      let positive = 0;
      let weight = 0;
      let n = 0;
      for (const o of inBucket) {
        const r = o.realised.get(hours);
        const end = o.t + hours * HOUR_MS;
        if (r === undefined || end > split) continue;
        // Age counted from when the outcome was known: a horizon that ended just before the
        // split is as recent as the fit can see.
        const w = halfLifeDays === null ? 1 : 2 ** (-(split - end) / (halfLifeDays * 24 * HOUR_MS));
        trainFrom = Math.min(trainFrom, o.t);
        naive += w * o.spreadBpsPerHour * hours;
        real += w * r;
        weight += w;
        n++;
        if (r > roundTripFeeBps(o.longVenue, o.shortVenue)) positive += w;
      }
      return {
        hours,
        retention: naive > 0 ? real / naive : 0,
        shareNetPositive: weight === 0 ? 0 : Math.min(1, positive / weight),
        samples: n,
      };
    });
    return { fromBps, horizons };
  });
  return { buckets, trainFrom };
}

/** Expected ÷ realised carry summed over the opportunities (what the report's ratio measures). */
function ratioOn(opps: readonly Opportunity[], table: CarryTable, hi: number): number {
  const hours = CARRY_HORIZONS_HOURS[hi]!;
  let e = 0;
  let r = 0;
  for (const o of opps) {
    const real = o.realised.get(hours);
    if (real === undefined) continue;
    e += carryFigures(table, o.spreadBpsPerHour, o.longVenue, o.shortVenue).horizons[hi]!.expectedCarryBps;
    r += real;
  }
  return r > 0 && e > 0 ? e / r : Number.NaN;
}

export interface HalfLifeChoice {
  halfLifeDays: number | null;
  /** Mean squared log(expected ÷ realised) over the inner folds and horizons, per candidate. */
  losses: Array<{ halfLifeDays: number | null; loss: number; ratios: number[][] }>;
  folds: number[];
}

/**
 * Walk-forward inside the training months: for each inner fold start s, fit on opportunities
 * whose horizon ended before s, score expected ÷ realised on opportunities sampled from s to
 * the next fold start whose horizon ended before the outer split. Nothing at or after `split`
 * is read.
 */
function chooseHalfLife(opps: readonly Opportunity[], split: number): HalfLifeChoice {
  const folds = innerFoldStarts(split, INNER_FOLDS);
  const threshold = BUCKET_EDGES_BPS[0]!;
  const losses = HALF_LIFE_CANDIDATES_DAYS.map((halfLifeDays) => {
    let sum = 0;
    let n = 0;
    // Expected ÷ realised per inner fold and horizon: how far one month's fit is off the next.
    const ratios: number[][] = [];
    folds.forEach((start, i) => {
      const row: number[] = [];
      ratios.push(row);
      const end = folds[i + 1] ?? split;
      const table = tableOf(fitBuckets(opps, start, halfLifeDays), start, halfLifeDays);
      CARRY_HORIZONS_HOURS.forEach((hours, hi) => {
        const test = opps.filter(
          (o) =>
            o.t >= start &&
            o.t < end &&
            o.t + hours * HOUR_MS <= split &&
            o.spreadBpsPerHour * 8 >= threshold,
        );
        const ratio = ratioOn(test, table, hi);
        row.push(ratio);
        if (!Number.isFinite(ratio)) return;
        sum += Math.log(ratio) ** 2;
        n++;
      });
    });
    return { halfLifeDays, loss: n === 0 ? Number.POSITIVE_INFINITY : sum / n, ratios };
  });
  let best = losses[losses.length - 1]!;
  for (const l of losses) if (l.loss < best.loss) best = l;
  return { halfLifeDays: best.halfLifeDays, losses, folds };
}

function tableOf(fit: ReturnType<typeof fitBuckets>, split: number, halfLifeDays: number | null): CarryTable {
  return CarryTableSchema.parse({
    version: 1,
    trainFrom: Number.isFinite(fit.trainFrom) ? fit.trainFrom : split,
    trainTo: split,
    fittedAt: new Date().toISOString(),
    sampleEveryHours: SAMPLE_EVERY_HOURS,
    halfLifeDays,
    buckets: fit.buckets,
  });
}

/**
 * Fits retention and the share net positive per spread bucket and horizon on opportunities
 * whose horizon ended before `split` only, weighting them by recency with a half-life chosen
 * by walk-forward inside the training months (chooseHalfLife).
 */
export function fitCarryTable(
  history: FundingHistory,
  split: number,
  options: CarryFitOptions = {},
): { table: CarryTable; choice: HalfLifeChoice | null } {
  const opps = sampleOpportunities(history);
  const choice = options.halfLifeDays === undefined ? chooseHalfLife(opps, split) : null;
  const halfLifeDays = choice ? choice.halfLifeDays : (options.halfLifeDays ?? null);
  return { table: tableOf(fitBuckets(opps, split, halfLifeDays), split, halfLifeDays), choice };
}

export interface CarryHorizonResult {
  hours: number;
  n: number;
  expectedBps: number;
  realisedBps: number;
  /** Spread now × hours: what the spread alone advertises. */
  naiveBps: number;
  ratio: Estimate;
  naiveRatio: number;
  /** Predicted share net positive (mean over opportunities) and the realised share. */
  predictedShare: number;
  realisedShare: number;
  /** Realised net carry of the top and bottom tenth by expected net carry. */
  topTenthNetBps: number;
  bottomTenthNetBps: number;
}

export interface CarryEvaluation {
  from: number;
  coins: number;
  opportunities: number;
  thresholdBps: number;
  horizons: CarryHorizonResult[];
  /** The top pick per sampling time (highest expected net): its realised net carry by horizon. */
  topPick: Array<{
    hours: number;
    n: number;
    meanNetBps: number;
    dayBlock: Interval;
    shareNetPositive: number;
  }>;
  /** Expected ÷ realised per calendar month of the test (by opportunity start) and horizon. */
  byMonth: Array<{ month: string; ratios: number[]; n: number[] }>;
  table: CarryTable;
  skipped: string[];
  /** How the half-life was chosen (null when scoring a shipped table). */
  halfLife: HalfLifeChoice | null;
}

export function evaluateCarry(history: FundingHistory, table: CarryTable, from: number): CarryEvaluation {
  const threshold = table.buckets[0]!.fromBps;
  const opps = sampleOpportunities(history).filter((o) => o.t >= from && o.spreadBpsPerHour * 8 >= threshold);
  const scored = opps.map((o) => ({
    o,
    fig: carryFigures(table, o.spreadBpsPerHour, o.longVenue, o.shortVenue),
  }));
  const horizons = CARRY_HORIZONS_HOURS.map((hours, hi) => {
    const rows = scored
      .filter((x) => x.o.realised.has(hours))
      .map((x) => ({
        t: x.o.t,
        expected: x.fig.horizons[hi]!.expectedCarryBps,
        realised: x.o.realised.get(hours)!,
        naive: x.fig.horizons[hi]!.naiveCarryBps,
        fee: x.fig.feeBps,
        share: x.fig.horizons[hi]!.shareNetPositive,
        net: x.fig.expectedNetCarryBps,
      }));
    const sum = (k: 'expected' | 'realised' | 'naive') => rows.reduce((a, r) => a + r[k], 0);
    const days = byDay(rows, (r) => r.t);
    const ratioOf = (d: readonly (readonly (typeof rows)[number][])[]) =>
      ratioOfSums(
        d,
        (x) => x.expected,
        (x) => x.realised,
      );
    const ranked = [...rows].sort((a, b) => b.net - a.net);
    const tenth = Math.max(1, Math.floor(ranked.length / 10));
    const meanNet = (xs: typeof rows) =>
      xs.length === 0 ? Number.NaN : xs.reduce((a, x) => a + x.realised - x.fee, 0) / xs.length;
    return {
      hours,
      n: rows.length,
      expectedBps: sum('expected'),
      realisedBps: sum('realised'),
      naiveBps: sum('naive'),
      ratio: { value: ratioOf(days), dayBlock: dayBlockInterval(days, ratioOf) },
      naiveRatio: sum('realised') === 0 ? Number.NaN : sum('naive') / sum('realised'),
      predictedShare: rows.length === 0 ? Number.NaN : rows.reduce((a, r) => a + r.share, 0) / rows.length,
      realisedShare:
        rows.length === 0 ? Number.NaN : rows.filter((r) => r.realised > r.fee).length / rows.length,
      topTenthNetBps: meanNet(ranked.slice(0, tenth)),
      bottomTenthNetBps: meanNet(ranked.slice(-tenth)),
    };
  });
  const byTime = new Map<number, (typeof scored)[number]>();
  for (const x of scored) {
    const cur = byTime.get(x.o.t);
    if (!cur || x.fig.expectedNetCarryBps > cur.fig.expectedNetCarryBps) byTime.set(x.o.t, x);
  }
  const picks = [...byTime.values()];
  const topPick = CARRY_HORIZONS_HOURS.map((hours) => {
    const rows = picks
      .filter((x) => x.o.realised.has(hours))
      .map((x) => ({ t: x.o.t, net: x.o.realised.get(hours)! - x.fig.feeBps }));
    const days = byDay(rows, (r) => r.t);
    const mean = (d: readonly (readonly (typeof rows)[number][])[]) =>
      ratioOfSums(
        d,
        (r) => r.net,
        () => 1,
      );
    return {
      hours,
      n: rows.length,
      meanNetBps: mean(days),
      dayBlock: dayBlockInterval(days, mean),
      shareNetPositive: rows.length === 0 ? Number.NaN : rows.filter((r) => r.net > 0).length / rows.length,
    };
  });
  const months = new Map<string, { e: number[]; r: number[]; n: number[] }>();
  for (const x of scored) {
    const key = new Date(x.o.t).toISOString().slice(0, 7);
    const m = months.get(key) ?? {
      e: CARRY_HORIZONS_HOURS.map(() => 0),
      r: CARRY_HORIZONS_HOURS.map(() => 0),
      n: CARRY_HORIZONS_HOURS.map(() => 0),
    };
    months.set(key, m);
    CARRY_HORIZONS_HOURS.forEach((hours, hi) => {
      const real = x.o.realised.get(hours);
      if (real === undefined) return;
      m.e[hi]! += x.fig.horizons[hi]!.expectedCarryBps;
      m.r[hi]! += real;
      m.n[hi]!++;
    });
  }
  const byMonth = [...months]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([month, m]) => ({
      month,
      ratios: m.e.map((e, i) => (m.r[i]! > 0 ? e / m.r[i]! : Number.NaN)),
      n: m.n,
    }));
  return {
    from,
    coins: history.coins,
    byMonth,
    opportunities: opps.length,
    thresholdBps: threshold,
    horizons,
    topPick,
    table,
    skipped: history.skipped,
    halfLife: null,
  };
}
