import { createWriteStream, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { HistoryFormat, HistoryRow } from '../../contracts/history.ts';
import { CSV_HEADER, csvLine, parquetStream } from './writers.ts';

/**
 * Test support: writes rows into `dir` as the export writes them in `format` (an NDJSON or CSV
 * file, or a Parquet folder), so a verify suite can edit rows and read them back as an analyst.
 */
export async function writeExport(
  dir: string,
  name: string,
  format: HistoryFormat,
  written: readonly HistoryRow[],
): Promise<string> {
  if (format === 'ndjson') {
    const path = join(dir, `${name}.ndjson`);
    writeFileSync(path, written.map((r) => `${JSON.stringify(r)}\n`).join(''));
    return path;
  }
  if (format === 'csv') {
    const path = join(dir, `${name}.csv`);
    writeFileSync(path, CSV_HEADER + written.map(csvLine).join(''));
    return path;
  }
  const path = join(dir, name);
  mkdirSync(path);
  await pipeline(parquetStream([[...written]]), createWriteStream(join(path, 'part-000001.parquet')));
  return path;
}
