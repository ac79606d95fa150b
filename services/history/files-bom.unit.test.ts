import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { HISTORY_COLUMNS, type HistoryFormat, type HistoryRow } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';
import { readExport, readExportPastMalformed } from './files.ts';
import { CSV_HEADER, csvLine } from './writers.ts';

const dir = mkdtempSync(join(tmpdir(), 'history-files-bom-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const verdictId = '41ba029a-4321-5e69-8be7-6d2186b5162b';
const row = (position: number) =>
  ({
    ...Object.fromEntries(HISTORY_COLUMNS.map((k) => [k, null])),
    position,
    verdict_id: verdictId,
    stream: 'verdicts-BINANCE_SPOT-AVAX-1h',
    revision: 0,
    recorded_at: '2026-11-29T23:04:25.345Z',
    exchange: 'BINANCE_SPOT',
    coin: 'AVAX',
    timeframe: '1h',
    hash: '99e3c80a1cf40105e77900c6b844c4660418d106e5f48b63c89b790e0087bef0',
    reveal_at: '2025-10-01T07:00:00.000Z',
    revealed: false,
    cursor: encodeCursor(position, verdictId),
  }) as unknown as HistoryRow;
const rows = [row(2), row(3)];

/** Every item read past malformed lines: rows, or the malformed line's message. */
async function readPastAs(path: string, format?: HistoryFormat): Promise<(HistoryRow | string)[]> {
  const items: (HistoryRow | string)[] = [];
  for await (const item of readExportPastMalformed(path, format))
    items.push(item instanceof Error ? item.message : item);
  return items;
}

async function readAll(path: string): Promise<HistoryRow[]> {
  const read: HistoryRow[] = [];
  for await (const r of readExport(path)) read.push(r);
  return read;
}

// An editor saving as "UTF-8 with BOM" (Excel's "CSV UTF-8", Notepad) writes U+FEFF before the
// first line: the mark of the encoding, no character of the file. Read as one, it would make an
// NDJSON file's first line no JSON (a row cut short, its file sniffed as CSV) and a CSV header's
// first column another name (a file in another format).
describe('an export saved with a byte order mark', () => {
  it('reads every row, in NDJSON and in CSV, CRLF line ends too', async () => {
    for (const eol of ['\n', '\r\n']) {
      const ndjson = join(dir, `bom${eol.length}.ndjson`);
      writeFileSync(ndjson, `\uFEFF${rows.map((r) => JSON.stringify(r)).join(eol)}${eol}`);
      const csv = join(dir, `bom${eol.length}.csv`);
      writeFileSync(csv, `\uFEFF${CSV_HEADER}${rows.map(csvLine).join('')}`.replaceAll('\n', eol));
      for (const path of [ndjson, csv]) {
        expect(await readAll(path)).toEqual(rows);
        expect(await readPastAs(path)).toEqual(rows);
      }
    }
  });

  it('still ends the read at a file in another format', async () => {
    const csvAsNdjson = join(dir, 'csv-as.ndjson');
    writeFileSync(csvAsNdjson, `\uFEFF${CSV_HEADER}${rows.map(csvLine).join('')}`);
    await expect(readPastAs(csvAsNdjson, 'ndjson')).rejects.toThrow("the file's first row is not NDJSON");
  });
});
