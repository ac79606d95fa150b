import { closeSync, createReadStream, existsSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { parquetReadObjects } from 'hyparquet';
import { HISTORY_COLUMNS, type HistoryFormat, HistoryRow, HistoryTrailer } from '../../contracts/history.ts';
import { decodeCursor, encodeCursor, tagMatches } from './cursor.ts';
import { isoTime } from './rows.ts';
import { KINDS } from './writers.ts';

/** The format an export written to `path` gets when none is named: from its name. */
export function formatOf(path: string): HistoryFormat {
  if (existsSync(path) && statSync(path).isDirectory()) return 'parquet';
  if (path.endsWith('.csv')) return 'csv';
  if (path.endsWith('.parquet')) return 'parquet';
  return 'ndjson';
}

/** UTF-8's byte order mark, which an editor saving as "UTF-8 with BOM" writes first. */
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * The format of an existing export, read from its first bytes rather than its name: exports are
 * renamed, and the CLI's own CSV export need not end in `.csv`. A directory is Parquet parts,
 * `PAR1` a Parquet file, a first non-blank `{` NDJSON, anything else CSV (its header line).
 */
function detectFormat(path: string): HistoryFormat {
  if (statSync(path).isDirectory()) return 'parquet';
  const head = Buffer.alloc(256);
  const fd = openSync(path, 'r');
  let length: number;
  try {
    length = readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  // A byte order mark (a file saved as "UTF-8 with BOM") is no character of the file.
  const text = head.subarray(head.subarray(0, 3).equals(BOM) ? 3 : 0, length).toString('latin1');
  if (text.startsWith('PAR1')) return 'parquet';
  const first = text.trimStart()[0];
  return first === undefined || first === '{' ? 'ndjson' : 'csv';
}

/** The row's time columns held as Unix milliseconds; the others are ISO 8601 text. */
const MILLIS_TIMES: ReadonlySet<keyof HistoryRow> = new Set(['candle_close_time']);

/** A time as the row holds it, from Parquet's TIMESTAMP (a Date) or the text of JSON and CSV. */
function coerceTime(name: keyof HistoryRow, value: unknown): string | number {
  if (typeof value === 'string' && !/^\d+$/.test(value)) {
    return MILLIS_TIMES.has(name) ? Date.parse(value) : value;
  }
  const ms = value instanceof Date ? value.getTime() : Number(value);
  return MILLIS_TIMES.has(name) ? ms : isoTime(ms);
}

function coerce(name: keyof HistoryRow, value: unknown): unknown {
  if (value === null || value === undefined || value === '') return null;
  const kind = KINDS[name];
  if (kind === 'timestamp') return coerceTime(name, value);
  // Only what the export writes for a boolean: anything else stays as read, so the row is refused
  // naming it rather than read as false (a `revealed` of "yes" would pass for a commitment).
  if (kind === 'bool')
    return value === true || value === 'true' ? true : value === false || value === 'false' ? false : value;
  if (kind === 'utf8') return String(value);
  // Text that is no decimal number stays as read, to be refused naming it: Number() reads ' ' as 0
  // and '0x10' as 16, which would pass for values the export never writes.
  if (typeof value === 'string' && !DECIMAL.test(value)) return value;
  return Number(value);
}

/** A number as the export writes one in text (String(n) of a finite number). */
const DECIMAL = /^-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?$/i;

/**
 * A row of an export whose fields are not a history row's (`position` -926, a call of MAYBE):
 * where it is in the file, what it says it is, as read, and which fields are wrong.
 */
export class MalformedRowError extends Error {
  override readonly name = 'MalformedRowError';
  constructor(
    /** `line 12` of an NDJSON or CSV file, `row 3 of part-000001.parquet`. */
    readonly where: string,
    readonly row: { stream: unknown; revision: unknown; verdictId: unknown; position: unknown },
    readonly fields: string[],
    readonly detail: string,
  ) {
    super(`${where}: malformed ${detail}`);
  }
}

const CUT_SHORT =
  'a line cut short (a download or a copy that stopped) is no row; fetch the rest again with after= the cursor of the last whole line, or export again';

/** What a file read in another format than its own is told. */
const NAME_FORMAT = "--format names the file's format (ndjson, csv, parquet)";

/** What to do about a line that is no row: past the first row, the file was cut; at its start, it is not in the format read. */
const cutOrFormat = (aRow: boolean, format: HistoryFormat) =>
  aRow ? CUT_SHORT : `the file's first row is not ${format === 'csv' ? 'CSV' : 'NDJSON'}: ${NAME_FORMAT}`;

/**
 * Whether `cursor` is the one its row was exported with: every export writes the cursor of the
 * row's own position and verdict id (cursor.ts). A CSV line cut inside its last field, the cursor,
 * keeps every column and reads as a row; only its cursor shows the cut.
 */
function namesRow(cursor: string, row: HistoryRow): boolean {
  const read = decodeCursor(cursor);
  return read !== null && read.position === row.position && tagMatches(read, row.verdict_id);
}

/** A row whose cursor, whole, is another's: named by the row and the field, in every format. */
function notItsCursor(where: string, row: HistoryRow): MalformedRowError {
  return new MalformedRowError(
    where,
    { stream: row.stream, revision: row.revision, verdictId: row.verdict_id, position: row.position },
    ['cursor'],
    `cursor ${JSON.stringify(row.cursor)} (not the cursor of its row, position ${row.position} and verdict ${row.verdict_id}: after= with it would resume the export elsewhere)`,
  );
}

/**
 * Whether a CSV cursor is the row's own cut short: empty, or a start of the cursor its row was
 * exported with (`h2`, or `h1` for an export of cursor.ts's first kind).
 */
function cutCursor(cursor: string, row: HistoryRow): boolean {
  if (cursor === '') return true;
  const hex = row.verdict_id.replaceAll('-', '');
  const h1 = Buffer.from(`h1:${row.position}:${hex.slice(0, 12)}`, 'latin1').toString('base64url');
  return [encodeCursor(row.position, row.verdict_id), h1].some((own) => own.startsWith(cursor));
}

/** A line or Parquet part that is no row at all: nothing of the row can be read, so nothing of it is named. */
function unreadable(where: string, detail: string): MalformedRowError {
  return new MalformedRowError(
    where,
    { stream: null, revision: null, verdictId: null, position: null },
    [],
    detail,
  );
}

/**
 * `record` as a row. Its cursor must be its own (`namesRow`): the hashes leave the cursor out, so
 * an edited one would pass every chain while `after=` with it resumes elsewhere. A CSV line
 * (`ownCursor` false) has its cursor checked by its reader, where one cut short is a line cut short.
 */
function toRow(record: Record<string, unknown>, where: string, ownCursor = true): HistoryRow {
  const row: Record<string, unknown> = {};
  for (const name of HISTORY_COLUMNS) row[name] = coerce(name, record[name]);
  // An export written before rows carried their cursor: it is the row's position and id.
  if (row.cursor === null && typeof row.verdict_id === 'string' && typeof row.position === 'number') {
    row.cursor = encodeCursor(row.position, row.verdict_id);
  }
  const parsed = HistoryRow.safeParse(row);
  if (parsed.success) {
    const read = parsed.data;
    if (!ownCursor || namesRow(read.cursor, read)) return read;
    throw notItsCursor(where, read);
  }
  const fields = [...new Set(parsed.error.issues.map((i) => String(i.path[0] ?? '(row)')))];
  const detail = parsed.error.issues
    .map((i) => {
      const field = String(i.path[0] ?? '(row)');
      // What the file holds: a number column's text that is no number reads as NaN, which JSON writes as null.
      const value = row[field];
      const shown = typeof value === 'number' && Number.isNaN(value) ? record[field] : value;
      return `${field} ${JSON.stringify(shown ?? null)} (${i.message})`;
    })
    .join('; ');
  throw new MalformedRowError(
    where,
    { stream: row.stream, revision: row.revision, verdictId: row.verdict_id, position: row.position },
    fields,
    detail,
  );
}

/** RFC 4180 fields of one line (the export never puts a line break inside a field). */
export function parseCsvLine(line: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i <= line.length) {
    if (line[i] === '"') {
      let value = '';
      i++;
      for (;;) {
        const q = line.indexOf('"', i);
        if (q < 0) throw new Error('unterminated quoted CSV field');
        value += line.slice(i, q);
        if (line[q + 1] === '"') {
          value += '"';
          i = q + 2;
        } else {
          i = q + 1;
          break;
        }
      }
      out.push(value);
      i++;
    } else {
      const comma = line.indexOf(',', i);
      const end = comma < 0 ? line.length : comma;
      out.push(line.slice(i, end));
      i = end + 1;
    }
  }
  return out;
}

function parquetParts(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .filter((f) => f.endsWith('.parquet'))
    .sort()
    .map((f) => join(path, f));
}

/**
 * Reads history rows back from an export: an NDJSON or CSV file, one Parquet file, or a directory
 * of Parquet parts (the CLI's resumable layout), in `format` or the one its content shows. Rows
 * come one at a time in file order; Parquet is read one file (one part) at a time. A row that is
 * no history row ends the read (a MalformedRowError).
 */
export function readExport(path: string, format = detectFormat(path)): AsyncGenerator<HistoryRow> {
  // Without goOn no MalformedRowError is yielded, only thrown.
  return readItems(path, format, false) as AsyncGenerator<HistoryRow>;
}

/**
 * readExport that goes on past a row that is no history row: it yields the MalformedRowError in
 * its place and reads on, so that what is checked over the whole file (verify's anchors and
 * recomputed outcomes) still sees every row after it. A CSV file without its header, or a file
 * in another format, still ends the read.
 */
export function readExportPastMalformed(
  path: string,
  format = detectFormat(path),
  onTrailer?: (count: TrailerCount) => void,
): AsyncGenerator<HistoryRow | MalformedRowError> {
  return readItems(path, format, true, onTrailer);
}

/**
 * The trailer line of an NDJSON answer saved as served (`trailer=true`): its line, the rows it says
 * the answer held, and the lines the file holds as rows since the answer began (the file's start,
 * or the trailer line before it: answers appended one after another each end with their own).
 */
export interface TrailerCount {
  line: number;
  says: number;
  held: number;
}

async function* readItems(
  path: string,
  format: HistoryFormat,
  goOn: boolean,
  onTrailer?: (count: TrailerCount) => void,
): AsyncGenerator<HistoryRow | MalformedRowError> {
  if (format === 'parquet') {
    for (const part of parquetParts(path)) {
      const name = part.slice(part.lastIndexOf('/') + 1);
      // A folder holding an export's directory (exports/ with verdicts.parquet/ in it): read as a
      // part it would fail as EISDIR, a bug's words, where the path given is one level too high.
      if (statSync(part).isDirectory())
        throw unreadable(
          name,
          `Parquet part: it is a directory, an export's parts of its own: give its path (${part})`,
        );
      const buf = await readFile(part);
      // Every Parquet file starts with PAR1, one cut short too (it lacks the footer): without it the
      // file is in another format (fewer than 4 bytes: cut short, below).
      if (buf.length >= 4 && buf.subarray(0, 4).toString('latin1') !== 'PAR1')
        throw unreadable(
          name,
          `Parquet part: it does not start with PAR1, so it is not Parquet: ${NAME_FORMAT}`,
        );
      let records: Record<string, unknown>[];
      try {
        records = await parquetReadObjects({
          file: buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer,
        });
      } catch (err) {
        // A part cut short (a download or a copy that stopped) has no footer: nothing of it can be read.
        const cut = unreadable(
          name,
          `Parquet part, not a readable file (${(err as Error).message}): one cut short has no footer; export it again, or resume the export (--resume)`,
        );
        if (!goOn) throw cut;
        yield cut;
        continue;
      }
      let n = 0;
      for (const record of records) {
        let row: HistoryRow;
        try {
          row = toRow(record, `row ${++n} of ${name}`);
        } catch (err) {
          if (!goOn || !(err instanceof MalformedRowError)) throw err;
          yield err;
          continue;
        }
        yield row;
      }
    }
    return;
  }
  // A directory is a Parquet export's parts: read as one file it would fail as EISDIR, a bug's words.
  if (statSync(path).isDirectory()) {
    throw unreadable(
      basename(path),
      `${format === 'csv' ? 'CSV' : 'NDJSON'} file: it is a directory (an export's Parquet parts), so it is not ${format === 'csv' ? 'CSV' : 'NDJSON'}: ${NAME_FORMAT}`,
    );
  }
  const lines = createInterface({
    input: createReadStream(path, 'utf8'),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  let header: string[] | null = null;
  let cursorColumn = -1;
  let lineNumber = 0;
  let rowsRead = 0;
  // Lines read as rows (malformed ones too) since the last trailer line.
  let sinceTrailer = 0;
  // The last row read whole, which a trailer line's cursor is at or past; whether the line read is a trailer.
  let lastRow: HistoryRow | null = null;
  let trailerLine = false;
  /**
   * Whether a line can only be a row's, cut short when unreadable: one after a row or after the CSV
   * header, or an NDJSON line opening as a JSON object. Before that, an unreadable line is a file in
   * another format (a CSV file without its header, one read with --format ndjson).
   */
  const rowLine = (line: string): boolean =>
    rowsRead > 0 || (format === 'csv' ? header !== null : line.trimStart().startsWith('{'));
  /** One line's row; null for the CSV header and the NDJSON trailer line. */
  const readLine = (line: string): HistoryRow | null => {
    if (format === 'csv') {
      let fields: string[];
      try {
        fields = parseCsvLine(line);
      } catch (err) {
        throw unreadable(
          `line ${lineNumber}`,
          `CSV line (${(err as Error).message}): ${cutOrFormat(rowLine(line), format)}`,
        );
      }
      if (!header) {
        // The export's header names its columns; a line that names none of them (a JSON line read
        // with --format csv) would read every field of the next line as wrong.
        if (!fields.includes('position') || !fields.includes('verdict_id'))
          throw unreadable(
            `line ${lineNumber}`,
            `CSV header (no position and verdict_id columns): ${cutOrFormat(false, format)}`,
          );
        header = fields;
        cursorColumn = header.indexOf('cursor');
        return null;
      }
      // A line cut short keeps the columns before the cut; read by name, the rest would pass as nulls.
      if (fields.length !== header.length) {
        throw unreadable(
          `line ${lineNumber}`,
          `CSV line: ${fields.length} fields where the header has ${header.length}; ${CUT_SHORT}`,
        );
      }
      // The header again: a CSV answer resumed with after= starts with its own, appended as is. Read
      // as a row it would be named by every field ("position" is no number), not by what it is.
      if (fields.every((field, i) => field === header![i])) {
        throw unreadable(
          `line ${lineNumber}`,
          'CSV line: the header again; every CSV answer starts with it, a resumed one (after=) too: leave it out when appending a resumed answer to the file',
        );
      }
      const row = toRow(
        Object.fromEntries(header.map((h, i) => [h, fields[i]])),
        `line ${lineNumber}`,
        false,
      );
      // The cursor column written empty (a cut right after the comma before it) would be filled in
      // from the row as for an export written before rows carried their cursor, which had no such
      // column at all.
      const cursor = cursorColumn < 0 ? null : fields[cursorColumn]!;
      if (cursor !== null && (cursor === '' || !namesRow(cursor, row))) {
        // Whole but another row's (edited): named as in every format; else the line was cut inside it.
        if (!cutCursor(cursor, row)) throw notItsCursor(`line ${lineNumber}`, row);
        throw unreadable(
          `line ${lineNumber}`,
          `CSV line: its cursor ${JSON.stringify(cursor)} is not the one of its row (position ${row.position}, verdict ${row.verdict_id}); ${CUT_SHORT}`,
        );
      }
      return row;
    }
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(line) as Record<string, unknown>;
    } catch (err) {
      throw unreadable(
        `line ${lineNumber}`,
        `JSON line (${(err as Error).message}): ${cutOrFormat(rowLine(line), format)}`,
      );
    }
    // JSON that is no object is no row (a whole export turned into one array, a bare value).
    if (record === null || typeof record !== 'object' || Array.isArray(record)) {
      const what = Array.isArray(record) ? 'an array' : record === null ? 'null' : `a ${typeof record}`;
      throw unreadable(
        `line ${lineNumber}`,
        `JSON line (${what}, not a row's object): ${cutOrFormat(rowLine(line), format)}`,
      );
    }
    // The trailer line of a served NDJSON export carries the cursor, not a row.
    if ('cursor' in record && !('verdict_id' in record)) {
      trailerLine = true;
      const trailer = HistoryTrailer.safeParse(record);
      if (trailer.success) onTrailer?.({ line: lineNumber, says: trailer.data.rows, held: sinceTrailer });
      sinceTrailer = 0;
      // Its cursor is at or past every row before it (past the rows the filters skipped too): one
      // before them is edited, and after= with it would serve those rows again.
      const at = trailer.success ? decodeCursor(trailer.data.cursor) : null;
      if (
        at !== null &&
        lastRow !== null &&
        (at.position < lastRow.position ||
          (at.position === lastRow.position && !tagMatches(at, lastRow.verdict_id)))
      ) {
        throw unreadable(
          `line ${lineNumber}`,
          `trailer line: its cursor ${JSON.stringify(trailer.data!.cursor)} names position ${at.position}, not at or past the row before it (position ${lastRow.position}, verdict ${lastRow.verdict_id}): after= with it would resume the export elsewhere`,
        );
      }
      return null;
    }
    return toRow(record, `line ${lineNumber}`);
  };
  for await (const read of lines) {
    lineNumber++;
    // The byte order mark is no character of the first line: left on, it makes the CSV header's
    // first column another name and the first JSON line no JSON, told as a row cut short.
    const line = lineNumber === 1 && read.startsWith('\uFEFF') ? read.slice(1) : read;
    if (line.trim() === '') continue;
    let row: HistoryRow | null;
    trailerLine = false;
    try {
      row = readLine(line);
    } catch (err) {
      // A file in another format: no line after it reads as a row either.
      if (!goOn || !(err instanceof MalformedRowError) || (!rowLine(line) && err.fields.length === 0))
        throw err;
      // A trailer line is no row its answer held.
      if (!trailerLine) sinceTrailer++;
      yield err;
      continue;
    }
    if (row === null) continue;
    sinceTrailer++;
    lastRow = row;
    yield row;
    rowsRead++;
  }
}
