// What a restart costs the risk bands in served coverage (bench/notes/band-scale-restart.md): per
// risk row, the band a market state fed the coin's whole history serves (the evaluator's), against
// the band a state rebuilt at a restart point (fed the last warmupCandles(tf) candles and 1h
// candles as MarketStates feeds it) serves over the next WINDOW_DAYS (30) days. RESUME_LAG_HOURS
// set: the rebuilt state resumes the whole-history state's band scales saved that many hours
// before the restart, as a restarted engine resumes its last save.
//   npx tsx bench/notes/band-scale-restart.mts [SHARED_MARKET_DIR=…] [TF=5m,1h] [RESUME_LAG_HOURS=6]
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { aggregateCandles } from '../../adapters/market/aggregate.ts';
import { SHARED_MARKET_DIR } from '../../adapters/market/shared-data.ts';
import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { readCandles } from '../../services/engine/evaluate/data-folder.ts';
import { warmupCandles } from '../../services/engine/market-states.ts';
import { createMarketState, type SavedBandScales } from '../../services/engine/signals/market-state.ts';
import { bandFor } from '../../services/engine/signals/volatility.ts';

const DATA = SHARED_MARKET_DIR;
const df = { data: DATA };
const DAY = 86_400_000;
const WINDOW = Number(process.env.WINDOW_DAYS ?? 30) * DAY;
const RESTARTS: number[] = [];
for (let t = Date.UTC(2025, 5, 1); t + WINDOW <= Date.UTC(2025, 9, 31); t += 15 * DAY) RESTARTS.push(t);
const FINE_WARMUP_HOURS = 500;
const ONLY = process.env.TF?.split(',');

type Served = { sigma: Float64Array; scale: Float64Array }[]; // per row, per candle index

function feed(
  exchange: 'BINANCE_SPOT' | 'BINANCE',
  coin: string,
  tf: Timeframe,
  candles: readonly Candle[],
  hours: readonly Candle[],
  from: number,
  to: number,
  hoursFrom: number,
  capture?: Map<number, SavedBandScales | null>,
  resume?: SavedBandScales | null,
): { served: Served; rows: { key: string; candles: number; band: { low: number; high: number } }[] } {
  const state = createMarketState({ exchange, coin, timeframe: tf });
  const tfMs = TIMEFRAME_MS[tf];
  const rows = state.riskRows.rows.map((r) => ({
    key: r.key,
    candles: r.candles,
    band: bandFor(r.model, exchange === 'BINANCE'),
  }));
  const served: Served = rows.map(() => ({
    sigma: new Float64Array(candles.length).fill(Number.NaN),
    scale: new Float64Array(candles.length).fill(Number.NaN),
  }));
  let h = hoursFrom;
  for (let i = from; i < to; i++) {
    const c = candles[i]!;
    h = state.updateHours(hours, h, c.openTime + tfMs);
    state.update(c);
    const ct = c.openTime + tfMs;
    if (capture?.has(ct)) capture.set(ct, state.savedBandScales());
    if (resume && resume.closeTime === ct && !state.resumeBandScales(resume)) throw new Error('not resumed');
    const risk = state.snapshot()?.volRisk ?? [];
    risk.forEach((r, k) => {
      if (r.sigma !== null) {
        served[k]!.sigma[i] = r.sigma;
        served[k]!.scale[i] = r.scale;
      }
    });
  }
  return { served, rows };
}

interface Tally {
  n: number;
  fullIn: number;
  restartIn: number;
  ratios: number[];
  perPoint: Map<number, { n: number; fullIn: number; restartIn: number }>;
}
const tallies = new Map<string, Tally>();
const tally = (key: string) => {
  let t = tallies.get(key);
  if (!t) {
    t = { n: 0, fullIn: 0, restartIn: 0, ratios: [], perPoint: new Map() };
    tallies.set(key, t);
  }
  return t;
};

async function market(
  exchange: 'BINANCE_SPOT' | 'BINANCE',
  coin: string,
  tf: Timeframe,
  candles: Candle[],
  hours: Candle[],
) {
  const tfMs = TIMEFRAME_MS[tf];
  const close = (i: number) => candles[i]!.openTime + tfMs;
  const LAG = Number(process.env.RESUME_LAG_HOURS ?? -1) * 3_600_000;
  const capture = new Map<number, SavedBandScales | null>();
  if (LAG >= 0) for (const R of RESTARTS) capture.set(R - LAG - ((R - LAG) % tfMs), null);
  const full = feed(exchange, coin, tf, candles, hours, 0, candles.length, 0, capture);
  const warmup = warmupCandles(tf);
  const venue = exchange === 'BINANCE' ? 'perp' : 'spot';
  for (const R of RESTARTS) {
    // The candle closing at R is the last a restarted state's warm-up holds (it serves R's close).
    const at = candles.findIndex((c) => c.openTime + tfMs === R);
    if (at < 0) continue;
    const end = Math.min(
      candles.length,
      candles.findIndex((c) => c.openTime + tfMs >= R + WINDOW),
    );
    const start = Math.max(0, at + 1 - warmup);
    // The 1h candles MarketStates reads for a new 2h…1d state: the last 500 closed by R.
    let closedByR = hours.findIndex((c) => c.openTime + 3_600_000 > R);
    if (closedByR < 0) closedByR = hours.length;
    const hoursFrom = Math.max(0, closedByR - FINE_WARMUP_HOURS);
    const saved = LAG >= 0 ? (capture.get(R - LAG - ((R - LAG) % tfMs)) ?? null) : null;
    const rebuilt = feed(
      exchange,
      coin,
      tf,
      candles,
      hours,
      start,
      end < 0 ? candles.length : end,
      hoursFrom,
      undefined,
      saved,
    );
    full.rows.forEach((row, k) => {
      const key = `${venue} ${tf} ${row.key}(${row.candles})`;
      const t = tally(key);
      const p = t.perPoint.get(R) ?? { n: 0, fullIn: 0, restartIn: 0 };
      const f = full.served[k]!;
      const r = rebuilt.served[k]!;
      t.ratios.push(r.scale[at]! / f.scale[at]!);
      for (let i = at; i < (end < 0 ? candles.length : end); i++) {
        if (i + row.candles >= candles.length) break;
        if (close(i) >= R + WINDOW) break;
        if (Number.isNaN(f.sigma[i]!) || Number.isNaN(r.sigma[i]!)) continue;
        const y = Math.log(candles[i + row.candles]!.close / candles[i]!.close);
        const inside = (sigma: number, scale: number) =>
          y >= row.band.low * sigma * scale && y <= row.band.high * sigma * scale ? 1 : 0;
        const fi = inside(f.sigma[i]!, f.scale[i]!);
        const ri = inside(r.sigma[i]!, r.scale[i]!);
        t.n++;
        t.fullIn += fi;
        t.restartIn += ri;
        p.n++;
        p.fullIn += fi;
        p.restartIn += ri;
      }
      t.perPoint.set(R, p);
    });
  }
}

const coinsOf = (folder: string, suffix: string) =>
  readdirSync(join(DATA, 'candles', folder))
    .filter((f) => f.endsWith(suffix))
    .map((f) => f.slice(0, -suffix.length).replace(/USDT$/, ''));

const t0 = Date.now();
for (const [folder, exchange] of [
  ['binance-spot', 'BINANCE_SPOT'],
  ['binance-usdm', 'BINANCE'],
] as const) {
  for (const coin of coinsOf(folder, '-1h.csv.gz')) {
    const hours = await readCandles(df, folder, `${coin}USDT-1h.csv.gz`);
    const fives = coinsOf(folder, '-5m.csv.gz').includes(coin)
      ? await readCandles(df, folder, `${coin}USDT-5m.csv.gz`)
      : null;
    for (const tf of ['5m', '15m', '30m', '1h', '2h', '4h', '8h', '12h', '1d'] as Timeframe[]) {
      if (ONLY && !ONLY.includes(tf)) continue;
      const small = tf === '5m' || tf === '15m' || tf === '30m';
      if (small && !fives) continue;
      const candles = small
        ? aggregateCandles(fives!, '5m', tf)
        : tf === '1h'
          ? hours
          : aggregateCandles(hours, '1h', tf);
      await market(exchange, coin, tf, candles, hours);
    }
    console.error(`${folder} ${coin} done ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  }
}

const pct = (a: number, n: number) => (n === 0 ? Number.NaN : (100 * a) / n);
console.log(
  `restart points ${RESTARTS.map((r) => new Date(r).toISOString().slice(0, 10)).join(' ')}, window ${WINDOW / DAY} d`,
);
console.log('row\tpoints\tfull%\trestart%\tdiff\tworst point diff\tscale ratio at restart min–max');
for (const [key, t] of [...tallies].sort()) {
  let worst = 0;
  for (const p of t.perPoint.values()) {
    const d = pct(p.restartIn, p.n) - pct(p.fullIn, p.n);
    if (p.n > 0 && Math.abs(d) > Math.abs(worst)) worst = d;
  }
  const ratios = t.ratios.filter(Number.isFinite);
  console.log(
    [
      key,
      t.n,
      pct(t.fullIn, t.n).toFixed(2),
      pct(t.restartIn, t.n).toFixed(2),
      (pct(t.restartIn, t.n) - pct(t.fullIn, t.n)).toFixed(2),
      worst.toFixed(2),
      ratios.length ? `${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}` : '-',
    ].join('\t'),
  );
}
