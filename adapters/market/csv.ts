import { readFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import type { Candle, FundingRate } from '../../contracts/market.ts';

/**
 * Readers for the market-data format of `shared/data/market` (gzip CSV with a header row, Unix
 * ms UTC). A malformed row is an error naming the file and line, never a silently skipped row.
 */
export class MarketFileError extends Error {
  override readonly name = 'MarketFileError';
}

async function readRows(path: string): Promise<{ header: string[]; rows: string[][] }> {
  const raw = await readFile(path);
  const text = path.endsWith('.gz') ? gunzipSync(raw).toString('utf8') : raw.toString('utf8');
  const lines = text.split('\n');
  const header = (lines[0] ?? '').trim().split(',');
  const rows: string[][] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    rows.push(line.split(','));
  }
  return { header, rows };
}

function num(value: string | undefined, path: string, line: number, column: string): number {
  const n = Number(value);
  if (value === undefined || value === '' || !Number.isFinite(n)) {
    throw new MarketFileError(`${path}:${line + 1}: column ${column} is not a number (${value})`);
  }
  return n;
}

export async function readCandleFile(path: string): Promise<Candle[]> {
  const { header, rows } = await readRows(path);
  if (header.join(',') !== 'open_time,open,high,low,close,volume') {
    throw new MarketFileError(`${path}: unexpected candle header ${header.join(',')}`);
  }
  return rows.map((r, i) => ({
    openTime: num(r[0], path, i + 1, 'open_time'),
    open: num(r[1], path, i + 1, 'open'),
    high: num(r[2], path, i + 1, 'high'),
    low: num(r[3], path, i + 1, 'low'),
    close: num(r[4], path, i + 1, 'close'),
    volume: num(r[5], path, i + 1, 'volume'),
  }));
}

/**
 * Funding files state either `interval_hours` or `hours_since_previous`; the latter is turned
 * into an interval (the first row takes the next row's gap, as it has none of its own).
 */
export async function readFundingFile(path: string): Promise<FundingRate[]> {
  const { header, rows } = await readRows(path);
  const third = header[2];
  if (header[0] !== 'funding_time' || header[1] !== 'rate') {
    throw new MarketFileError(`${path}: unexpected funding header ${header.join(',')}`);
  }
  if (third !== 'interval_hours' && third !== 'hours_since_previous') {
    throw new MarketFileError(`${path}: third column must be interval_hours or hours_since_previous`);
  }
  const out: FundingRate[] = rows.map((r, i) => ({
    fundingTime: num(r[0], path, i + 1, 'funding_time'),
    rate: num(r[1], path, i + 1, 'rate'),
    intervalHours: r[2] === '' || r[2] === undefined ? Number.NaN : num(r[2], path, i + 1, third),
  }));
  if (third === 'hours_since_previous' && out.length > 1 && Number.isNaN(out[0]!.intervalHours)) {
    out[0]!.intervalHours = out[1]!.intervalHours;
  }
  // A settlement whose stated interval is missing (one Bybit row, where the contract moved from
  // 1h to 8h) covered the time since the previous settlement, which is what a gap column states.
  for (let i = 1; i < out.length; i++) {
    const f = out[i]!;
    if (third === 'interval_hours' && Number.isNaN(f.intervalHours)) {
      f.intervalHours = (f.fundingTime - out[i - 1]!.fundingTime) / 3_600_000;
    }
  }
  for (const [i, f] of out.entries()) {
    if (!(f.intervalHours > 0)) throw new MarketFileError(`${path}:${i + 2}: no usable funding interval`);
  }
  return out;
}
