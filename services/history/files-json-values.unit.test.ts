import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { HISTORY_COLUMNS, type HistoryRow } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';
import { readExportPastMalformed } from './files.ts';

const dir = mkdtempSync(join(tmpdir(), 'history-files-json-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const verdictId = '41ba029a-4321-5e69-8be7-6d2186b5162b';
const row = {
  ...Object.fromEntries(HISTORY_COLUMNS.map((k) => [k, null])),
  position: 2,
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
  cursor: encodeCursor(2, verdictId),
} as unknown as HistoryRow;

async function readPast(path: string): Promise<(HistoryRow | string)[]> {
  const items: (HistoryRow | string)[] = [];
  for await (const item of readExportPastMalformed(path, 'ndjson')) {
    items.push(item instanceof Error ? item.message : item);
  }
  return items;
}

// JSON that parses but is no object is no row of an NDJSON export: a whole export turned into one
// JSON array (`jq -s -c`) is a file in another format, and a bare value is named as the line it is,
// not read as a row whose every field is missing nor left to fail on the value's type.
describe('an NDJSON line that is JSON but no object', () => {
  it('ends the read at a JSON array: a file in another format', async () => {
    const path = join(dir, 'array.ndjson');
    writeFileSync(path, `${JSON.stringify([row, row])}\n`);
    await expect(readPast(path)).rejects.toThrow(
      /line 1: malformed JSON line \(an array, .*first row is not NDJSON/,
    );
  });

  it('names a bare value after a row as a line cut short, and reads on', async () => {
    for (const value of ['null', '42', '"text"', 'true']) {
      const path = join(dir, 'value.ndjson');
      writeFileSync(path, `${JSON.stringify(row)}\n${value}\n${JSON.stringify(row)}\n`);
      expect(await readPast(path)).toEqual([
        row,
        expect.stringMatching(/^line 2: malformed JSON line \(/),
        row,
      ]);
    }
  });
});
