import { readFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import type { Candle, FundingRate } from '../../contracts/market.ts';
import { CandleColumns } from './candle-columns.ts';

/**
 * Readers for the market-data format of `shared/data/market` (gzip CSV with a header row, Unix
 * ms UTC). A malformed row is an error naming the file and line, never a silently skipped row.
 */
export class MarketFileError extends Error {
  override readonly name = 'MarketFileError';
}

/**
 * A market file's text. A truncated or corrupt gzip is named: zlib's own error ('unexpected end
 * of file') says nothing of which of a few hundred files it was.
 */
async function readText(path: string): Promise<string> {
  const raw = await readFile(path);
  if (!path.endsWith('.gz')) return raw.toString('utf8');
  try {
    return gunzipSync(raw).toString('utf8');
  } catch (err) {
    throw new MarketFileError(`${path}: not a readable gzip file (${(err as Error).message})`);
  }
}

async function readRows(path: string): Promise<{ header: string[]; rows: string[][] }> {
  const text = await readText(path);
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

const CANDLE_HEADER = 'open_time,open,high,low,close,volume';
const CANDLE_COLUMNS = CANDLE_HEADER.split(',');

/**
 * A candle file straight into columns: each field is cut from the text and read with Number()
 * where it stands, so no row arrays or line strings outlive their field. Through row arrays, the
 * replay's first reads after start (1.5M candles of the full data set) peaked the old generation
 * at about 220 MB, and the process kept that memory: 700–780 MB RSS idle, 490 MB this way.
 */
export async function readCandleColumns(path: string): Promise<CandleColumns> {
  const text = await readText(path);
  const headerEnd = text.indexOf('\n');
  const header = (headerEnd === -1 ? text : text.slice(0, headerEnd)).trim();
  if (header !== CANDLE_HEADER) {
    throw new MarketFileError(`${path}: unexpected candle header ${header}`);
  }
  // Rows are the non-blank lines after the header; a first pass finds them to size the columns.
  const starts: number[] = [];
  const ends: number[] = [];
  const lineNos: number[] = [];
  let lineNo = 2;
  for (let start = headerEnd === -1 ? text.length : headerEnd + 1; start < text.length; lineNo++) {
    const nl = text.indexOf('\n', start);
    const end = nl === -1 ? text.length : nl;
    if (text.slice(start, end).trim() !== '') {
      starts.push(start);
      ends.push(end);
      lineNos.push(lineNo);
    }
    start = end + 1;
  }
  const columns = CandleColumns.ofLength(starts.length);
  const targets = [columns.openTime, columns.open, columns.high, columns.low, columns.close, columns.volume];
  for (let row = 0; row < starts.length; row++) {
    const line = text.slice(starts[row], ends[row]).trim();
    let from = 0;
    for (let c = 0; c < 6; c++) {
      const comma = line.indexOf(',', from);
      const stop = comma === -1 ? line.length : comma;
      // Past the last field a column is missing (undefined); fields past the sixth are ignored.
      const field = from <= line.length ? line.slice(from, stop) : undefined;
      targets[c]![row] = num(field, path, lineNos[row]! - 1, CANDLE_COLUMNS[c]!);
      from = stop + 1;
    }
  }
  return columns;
}

export async function readCandleFile(path: string): Promise<Candle[]> {
  return (await readCandleColumns(path)).slice();
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
