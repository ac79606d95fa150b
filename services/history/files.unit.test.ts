import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { HISTORY_COLUMNS, type HistoryFormat, type HistoryRow } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';
import { writeExport } from './export-fixture.ts';
import { MalformedRowError, readExport, readExportPastMalformed } from './files.ts';
import { CSV_HEADER, csvLine } from './writers.ts';

const dir = mkdtempSync(join(tmpdir(), 'history-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const verdictId = '41ba029a-4321-5e69-8be7-6d2186b5162b';
/** A commitment as the export writes it: its outcome and content columns null until revealed. */
const commitment = {
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
/** The row after it, for the reads that go on past a malformed line. */
const second = { ...commitment, position: 3, cursor: encodeCursor(3, verdictId) } as HistoryRow;

/** Reads past malformed lines; each must be told as a line cut short, not as a file in another format. */
async function readPast(path: string): Promise<(HistoryRow | string)[]> {
  const items: (HistoryRow | string)[] = [];
  for await (const item of readExportPastMalformed(path)) {
    if (item instanceof MalformedRowError) expect(item.message).toContain('a line cut short');
    items.push(item instanceof MalformedRowError ? `malformed ${item.where}` : item);
  }
  return items;
}

/** Every item read past malformed lines, as read: rows, or the malformed line's message. */
async function readPastAs(path: string, format?: HistoryFormat): Promise<(HistoryRow | string)[]> {
  const items: (HistoryRow | string)[] = [];
  for await (const item of readExportPastMalformed(path, format)) {
    items.push(item instanceof Error ? item.message : item);
  }
  return items;
}

async function readAll(path: string): Promise<HistoryRow[]> {
  const rows: HistoryRow[] = [];
  for await (const row of readExport(path)) rows.push(row);
  return rows;
}

const ndjson = (name: string, row: Record<string, unknown>) => {
  const path = join(dir, `${name}.ndjson`);
  writeFileSync(path, `${JSON.stringify(row)}\n`);
  return path;
};
const csv = (name: string, row: Record<string, unknown>) => {
  const path = join(dir, `${name}.csv`);
  writeFileSync(path, CSV_HEADER + csvLine(row as unknown as HistoryRow));
  return path;
};

describe('reading an export back: a malformed value', () => {
  it('reads the row as written', async () => {
    expect(await readAll(ndjson('clean', commitment))).toEqual([commitment]);
    expect(await readAll(csv('clean', commitment))).toEqual([commitment]);
  });

  it('names a number column that holds no number by what the file holds, not null', async () => {
    for (const path of [
      ndjson('position', { ...commitment, position: 'abc' }),
      csv('position', { ...commitment, position: 'abc' }),
    ]) {
      await expect(readAll(path)).rejects.toMatchObject({
        name: 'MalformedRowError',
        fields: ['position'],
        message: expect.stringMatching(/^line \d+: malformed position "abc" \(/),
      });
    }
  });

  it('names a number column whose text Number() would still read (blank, hex) by what the file holds', async () => {
    for (const [path, text] of [
      [ndjson('blank', { ...commitment, position: ' ' }), ' '],
      [ndjson('hex', { ...commitment, position: '0x10' }), '0x10'],
      [csv('hex', { ...commitment, position: '0x10' }), '0x10'],
    ] as const) {
      await expect(readAll(path)).rejects.toMatchObject({
        name: 'MalformedRowError',
        fields: ['position'],
        message: expect.stringContaining(`malformed position ${JSON.stringify(text)} (`),
      });
    }
  });

  it('refuses a boolean that is neither true nor false, naming it, rather than read it as false', async () => {
    for (const path of [
      ndjson('revealed', { ...commitment, revealed: 'yes' }),
      csv('revealed', { ...commitment, revealed: 'yes' }),
    ]) {
      await expect(readAll(path)).rejects.toMatchObject({
        name: 'MalformedRowError',
        fields: ['revealed'],
        message: expect.stringMatching(/^line \d+: malformed revealed "yes" \(/),
      });
    }
  });
});

describe('reading an export past a malformed row (verify --anchors, --data)', () => {
  it('goes on past a CSV row cut short, the first one after the header included', async () => {
    const cut = csvLine(commitment).trimEnd().split(',').slice(0, 5).join(',');
    for (const [name, lines] of [
      ['cut-first', [cut, csvLine(second).trimEnd()]],
      ['cut-later', [csvLine(commitment).trimEnd(), cut, csvLine(second).trimEnd()]],
    ] as const) {
      const path = join(dir, `${name}.csv`);
      writeFileSync(path, `${CSV_HEADER}${lines.join('\n')}\n`);
      const items = await readPast(path);
      expect(items.filter((i) => typeof i === 'string')).toEqual([
        `malformed line ${lines.indexOf(cut) + 2}`,
      ]);
      expect(items.at(-1)).toEqual(second);
    }
  });

  it('ends at a file that is no CSV export: its first line names no column of one', async () => {
    const path = join(dir, 'no-header.csv');
    writeFileSync(path, `${csvLine(commitment)}${csvLine(second)}`);
    await expect(readPast(path)).rejects.toMatchObject({ name: 'MalformedRowError' });
  });
});

describe('reading an NDJSON export past a malformed row', () => {
  it('goes on past a JSON line cut short, the first one included (it opens as a row does)', async () => {
    const cut = JSON.stringify(commitment).slice(0, 40);
    for (const [name, lines] of [
      ['cut-first', [cut, JSON.stringify(second)]],
      ['cut-later', [JSON.stringify(commitment), cut, JSON.stringify(second)]],
    ] as const) {
      const path = join(dir, `${name}.ndjson`);
      writeFileSync(path, `${lines.join('\n')}\n`);
      const items = await readPast(path);
      expect(items.filter((i) => typeof i === 'string')).toEqual([
        `malformed line ${lines.indexOf(cut) + 1}`,
      ]);
      expect(items.at(-1)).toEqual(second);
    }
  });

  it('ends at a file that is no NDJSON export: its first line is no JSON object', async () => {
    const path = join(dir, 'csv-as.ndjson');
    writeFileSync(path, `${CSV_HEADER}${csvLine(second)}`);
    await expect(readExportPastMalformed(path, 'ndjson').next()).rejects.toMatchObject({
      name: 'MalformedRowError',
    });
  });
});

// An editor saving as "UTF-8 with BOM" (Excel's "CSV UTF-8", Notepad) writes U+FEFF before the
// first line: the mark of the encoding, no character of the file. Read as one, it would make an
// NDJSON file's first line no JSON (a row cut short, its file sniffed as CSV) and a CSV header's
// first column another name (a file in another format).
describe('an export saved with a byte order mark', () => {
  const rows = [commitment, second];

  it('reads every row, in NDJSON and in CSV, CRLF line ends too', async () => {
    for (const eol of ['\n', '\r\n']) {
      const ndjsonPath = join(dir, `bom${eol.length}.ndjson`);
      writeFileSync(ndjsonPath, `\uFEFF${rows.map((r) => JSON.stringify(r)).join(eol)}${eol}`);
      const csvPath = join(dir, `bom${eol.length}.csv`);
      writeFileSync(csvPath, `\uFEFF${CSV_HEADER}${rows.map(csvLine).join('')}`.replaceAll('\n', eol));
      for (const path of [ndjsonPath, csvPath]) {
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

// JSON that parses but is no object is no row of an NDJSON export: a whole export turned into one
// JSON array (`jq -s -c`) is a file in another format, and a bare value is named as the line it is,
// not read as a row whose every field is missing nor left to fail on the value's type.
describe('an NDJSON line that is JSON but no object', () => {
  it('ends the read at a JSON array: a file in another format', async () => {
    const path = join(dir, 'array.ndjson');
    writeFileSync(path, `${JSON.stringify([commitment, commitment])}\n`);
    await expect(readPastAs(path, 'ndjson')).rejects.toThrow(
      /line 1: malformed JSON line \(an array, .*first row is not NDJSON/,
    );
  });

  it('names a bare value after a row as a line cut short, and reads on', async () => {
    for (const value of ['null', '42', '"text"', 'true']) {
      const path = join(dir, 'value.ndjson');
      writeFileSync(path, `${JSON.stringify(commitment)}\n${value}\n${JSON.stringify(commitment)}\n`);
      expect(await readPastAs(path, 'ndjson')).toEqual([
        commitment,
        expect.stringMatching(/^line 2: malformed JSON line \(/),
        commitment,
      ]);
    }
  });
});

// A Parquet export is a directory of parts: read with --format ndjson or csv it is a file in
// another format, named as one, not a read failing on the directory (EISDIR).
describe('a Parquet export read as NDJSON or CSV', () => {
  it('ends the read naming the directory and --format', async () => {
    const parts = join(dir, 'parts.parquet');
    mkdirSync(parts);
    for (const format of ['ndjson', 'csv'] as const) {
      const read = readExportPastMalformed(`${parts}/`, format).next();
      await expect(read).rejects.toMatchObject({ name: 'MalformedRowError', where: 'parts.parquet' });
      await expect(readExport(parts, format).next()).rejects.toThrow(
        `parts.parquet: malformed ${format === 'csv' ? 'CSV' : 'NDJSON'} file: it is a directory (an export's Parquet parts), so it is not ${format === 'csv' ? 'CSV' : 'NDJSON'}: --format names the file's format (ndjson, csv, parquet)`,
      );
    }
  });
});

// The folder above an export (exports/, holding verdicts.parquet/) given as the path: its
// directory is named with the path to give, not read as a part failing on EISDIR.
describe('a folder holding a Parquet export directory', () => {
  it('ends the read naming the directory and its path', async () => {
    const above = join(dir, 'exports');
    mkdirSync(join(above, 'verdicts.parquet'), { recursive: true });
    for (const read of [readExport(above).next(), readExportPastMalformed(above).next()]) {
      await expect(read).rejects.toMatchObject({ name: 'MalformedRowError', where: 'verdicts.parquet' });
    }
    await expect(readExport(above).next()).rejects.toThrow(
      `verdicts.parquet: malformed Parquet part: it is a directory, an export's parts of its own: give its path (${join(above, 'verdicts.parquet')})`,
    );
  });
});

// A CSV answer resumed with after= starts with its own header: appended as is, the line is named
// as the header it is, not as a row whose every field is malformed.
describe('a CSV export with its header again after a row', () => {
  it('names the line as the header of a resumed answer, and reads on past it', async () => {
    const path = join(dir, 'resumed-header.csv');
    writeFileSync(path, `${CSV_HEADER}${csvLine(commitment)}${CSV_HEADER}${csvLine(second)}`);
    const rows: HistoryRow[] = [];
    const read = (async () => {
      for await (const row of readExport(path)) rows.push(row);
    })();
    await expect(read).rejects.toThrow(
      'line 3: malformed CSV line: the header again; every CSV answer starts with it, a resumed one (after=) too: leave it out when appending a resumed answer to the file',
    );
    expect(rows).toEqual([commitment]);
    const past: (HistoryRow | string)[] = [];
    for await (const item of readExportPastMalformed(path))
      past.push(item instanceof MalformedRowError ? item.where : item);
    expect(past).toEqual([commitment, 'line 3', second]);
  });
});

// A row's cursor is its own log position and verdict id (cursor.ts), in every format. A cursor
// edited to another row's, or to a position the row does not hold, would resume an analyst's
// export elsewhere (rows left out or repeated) while every hash still matched.
describe('a row whose cursor is not its own', () => {
  it('is a malformed row named by its place and the cursor field, in every format', async () => {
    const other = encodeCursor(3, verdictId);
    const paths = [
      ndjson('foreign-cursor', { ...commitment, cursor: other }),
      csv('foreign-cursor', { ...commitment, cursor: other }),
      await writeExport(dir, 'foreign-cursor-parquet', 'parquet', [{ ...commitment, cursor: other }]),
    ];
    for (const path of paths) {
      await expect(readAll(path)).rejects.toMatchObject({
        name: 'MalformedRowError',
        fields: ['cursor'],
        row: { position: 2, verdictId },
        message: expect.stringContaining(`malformed cursor ${JSON.stringify(other)} (`),
      });
    }
    // A CSV line cut inside its cursor keeps the start of its own: a line cut short, no row named.
    const cut = csv('cut-cursor', { ...commitment, cursor: commitment.cursor.slice(0, -4) });
    await expect(readAll(cut)).rejects.toMatchObject({
      fields: [],
      message: expect.stringContaining('a line cut short'),
    });
    // Another verdict's id at the row's own position: the tag names another event.
    const tagged = encodeCursor(2, '41ba029a-4321-5e69-8be7-000000000000');
    await expect(readAll(ndjson('foreign-tag', { ...commitment, cursor: tagged }))).rejects.toMatchObject({
      fields: ['cursor'],
    });
    // Left out altogether (an export written before rows carried their cursor): made from the row.
    const { cursor: _, ...bare } = commitment;
    expect(await readAll(ndjson('no-cursor', bare))).toEqual([commitment]);
  });
});

// The trailer line of an NDJSON answer (trailer=true) says where to resume: at or past every row
// before it. One edited back would serve those rows again; the rows' hashes say nothing of it.
describe('an NDJSON trailer line whose cursor is before the row above it', () => {
  const trailer = (cursor: string, rows: number) => `${JSON.stringify({ cursor, rows })}\n`;
  const lines = (...parts: string[]) => {
    const path = join(dir, `trailer-${parts.length}-${Math.random().toString(36).slice(2)}.ndjson`);
    writeFileSync(path, parts.join(''));
    return path;
  };
  const row = (r: HistoryRow) => `${JSON.stringify(r)}\n`;

  it('is malformed, named by its line; one at or past it (the filters skipped rows) reads', async () => {
    const back = lines(row(commitment), row(second), trailer(encodeCursor(2, verdictId), 2));
    await expect(readAll(back)).rejects.toThrow(
      `line 3: malformed trailer line: its cursor ${JSON.stringify(encodeCursor(2, verdictId))} names position 2, not at or past the row before it (position 3`,
    );
    // The row's own position under another verdict's id: not the row it says.
    const foreign = lines(row(second), trailer(encodeCursor(3, '41ba029a-4321-5e69-8be7-000000000000'), 1));
    await expect(readAll(foreign)).rejects.toThrow('line 2: malformed trailer line');
    // At its last row, or past it: read, as is a trailer of an answer of no row.
    const at = lines(
      row(commitment),
      trailer(encodeCursor(2, verdictId), 1),
      trailer(encodeCursor(2, verdictId), 0),
    );
    expect(await readAll(at)).toEqual([commitment]);
    const past = lines(row(commitment), trailer(encodeCursor(9, '41ba029a-4321-5e69-8be7-000000000009'), 1));
    expect(await readAll(past)).toEqual([commitment]);
    // Read past: the rows after it still read, and the next trailer counts only its own rows.
    const counts: { says: number; held: number }[] = [];
    const items: (HistoryRow | string)[] = [];
    const on = (c: { says: number; held: number }) => counts.push({ says: c.says, held: c.held });
    for await (const item of readExportPastMalformed(
      lines(
        row(commitment),
        trailer(encodeCursor(1, verdictId), 1),
        row(second),
        trailer(encodeCursor(3, verdictId), 1),
      ),
      undefined,
      on,
    ))
      items.push(item instanceof MalformedRowError ? item.where : item);
    expect(items).toEqual([commitment, 'line 2', second]);
    expect(counts).toEqual([
      { says: 1, held: 1 },
      { says: 1, held: 1 },
    ]);
  });
});
