import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, revealTime } from '../../contracts/history.ts';
import { outcomeDueAt } from './outcome.ts';
import { historyRow } from './rows.ts';

/** A verdict as the export reads it back, with its log position. */
export interface StoredVerdictEntry {
  key: number;
  /** The bytes this module lays out. */
  value: Buffer;
}

/** The export-rows projection as the scan reads it (export-row-store.ts). */
export interface StoredRows {
  /** False while it cannot be relied on (not started, failed). */
  readonly usable: boolean;
  readonly checkpoint: number;
  readonly checkpointId: string | null;
  verdictsAfter(after: number, upTo: number, limit: number): StoredVerdictEntry[];
  outcome(verdictId: string): Buffer | undefined;
  /** Resolves once the checkpoint reaches `position`; rejects after `timeoutMs`. */
  waitFor(position: number, timeoutMs: number): Promise<void>;
}

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

/**
 * What the export-rows store (export-row-store.ts) keeps per verdict and per outcome, and how an
 * NDJSON line is put back together from it. Pure: the same events give the same bytes, so the
 * store can be rebuilt from the log at any time.
 *
 * A revealed row's NDJSON line is `JSON.stringify(historyRow(...))`; its outcome fields come last
 * (HistoryRow's key order), so the line is the verdict's part ("head", up to and including the
 * comma before `"outcome_id"`) followed by the outcome's part ("tail", to the closing brace). The
 * head is written once when the verdict is recorded, the tail once when its outcome resolves; an
 * export writes the line from those stored bytes instead of decoding and serialising the events
 * again.
 *
 * The head is not stored as it is written, though: its string values are the record's string
 * columns again (the inputs' JSON, most of a record, escaped as a JSON string), and stored twice
 * they pushed a real verdict's record (2,950-3,160 B) past what LMDB keeps on a leaf page
 * (2,020 B on 4 KB pages), so every verdict took a 4 KB overflow page of its own. The stored head
 * is a template: the head with those values cut out, and where each goes and from which column
 * (`storedHead`); `writeHead` puts them back, escaping what needs it, byte for byte as
 * JSON.stringify wrote the line. The inputs column holds the inputs' JSON already escaped, as the
 * line has it (F_INPUTS): escaping ~1 KB a row was 38 % of an NDJSON export's CPU, while
 * Parquet, which wants it plain, unescapes it while packing rows (`unescapeInputs`), on the
 * thread that waits for the encoder anyway.
 */

/** The tail of a row that has no outcome attached. */
/** A row's outcome columns before its outcome is known (or while its content is sealed). */
export const NO_OUTCOME = {
  outcome_id: null,
  return_1: null,
  return_6: null,
  return_24: null,
  result: null,
  net_centi_bps: null,
  mae_bps: null,
  mfe_bps: null,
  realised_vol: null,
  lean: null,
  lean_net_centi_bps: null,
  outcome_hash: null,
  outcome_prev_hash: null,
  outcome_position: null,
} as const;

export const NO_OUTCOME_TAIL = Buffer.from(`${JSON.stringify(NO_OUTCOME).slice(1)}`);

/**
 * Stored per verdict, keyed by its log position, as bytes read back without a decoder (an
 * export touches only what it needs of each): the VERDICT_NUMBERS as float64s, a u16 mask of
 * the VERDICT_STRINGS that are null, the u16 end offset of each string, the strings as UTF-8,
 * then the template of the revealed NDJSON line's head (`storedHead`). Parquet copies the
 * strings' bytes straight into its columns; NDJSON writes the head from the template and them.
 */
export const VERDICT_NUMBERS = [
  'revealAt',
  'dueAt',
  'candleCloseTime',
  'revision',
  'confidence',
  'score',
  'price',
] as const;
export const VERDICT_STRINGS = [
  'exchange',
  'coin',
  'timeframe',
  'call',
  'verdict_id',
  'hash',
  'stream',
  'recorded_at',
  'prev_hash',
  'reveal_at',
  'regime',
  'feed',
  'engine_version',
  'trigger',
  'inputs_json',
] as const;
export const F_EXCHANGE = 0;
export const F_COIN = 1;
export const F_TIMEFRAME = 2;
export const F_CALL = 3;
export const F_ID = 4;
const F_HASH = 5;
export const F_STREAM = 6;
/**
 * The inputs' JSON column. Stored as the inside of the JSON string the NDJSON line writes (quotes
 * and backslashes escaped), not as the plain JSON Parquet writes: see `unescapeInputs`.
 */
export const F_INPUTS = VERDICT_STRINGS.length - 1;
/** Per outcome: the numbers (NaN stands for null), then the strings, then the row's tail. */
export const OUTCOME_NUMBERS = [
  'return_1',
  'return_6',
  'return_24',
  'net_centi_bps',
  'mae_bps',
  'mfe_bps',
  'realised_vol',
  'lean_net_centi_bps',
  'outcome_position',
] as const;
export const OUTCOME_STRINGS = [
  'verdict_hash',
  'outcome_id',
  'result',
  'lean',
  'outcome_hash',
  'outcome_prev_hash',
] as const;
const O_HASH = 0;

/** Bytes of a record: numbers, null mask, string ends, strings, then the rest (head or tail). */
function encodeRecord(
  numbers: readonly number[],
  strings: readonly (string | null)[],
  rest: string | Buffer,
): Buffer {
  const bytes = strings.map((t) => (t === null ? null : Buffer.from(t)));
  const stringsAt = numbers.length * 8 + 2 + strings.length * 2;
  const total = bytes.reduce((n, b) => n + (b?.length ?? 0), 0);
  if (total > 0xffff) throw new Error('history export record: strings over 64 KiB');
  const tail = typeof rest === 'string' ? Buffer.from(rest) : rest;
  const out = Buffer.allocUnsafe(stringsAt + total + tail.length);
  numbers.forEach((x, i) => {
    out.writeDoubleLE(x, i * 8);
  });
  let mask = 0;
  let end = 0;
  bytes.forEach((b, i) => {
    if (b === null) mask |= 1 << i;
    else end += b.copy(out, stringsAt + end);
    out.writeUInt16LE(end, numbers.length * 8 + 2 + i * 2);
  });
  out.writeUInt16LE(mask, numbers.length * 8);
  tail.copy(out, stringsAt + end);
  return out;
}

const V_MASK = VERDICT_NUMBERS.length * 8;
const V_ENDS = V_MASK + 2;
const V_STRINGS = V_ENDS + VERDICT_STRINGS.length * 2;
const O_MASK = OUTCOME_NUMBERS.length * 8;
const O_ENDS = O_MASK + 2;
const O_STRINGS = O_ENDS + OUTCOME_STRINGS.length * 2;

export const revealAtOf = (v: Buffer): number => v.readDoubleLE(0);
export const dueAtOf = (v: Buffer): number => v.readDoubleLE(8);
export const candleCloseTimeOf = (v: Buffer): number => v.readDoubleLE(16);
export const revisionOf = (v: Buffer): number => v.readDoubleLE(24);

/** Offsets of a record's parts (little-endian u16 fields are read byte by byte: no bounds checks). */
export interface RecordLayout {
  mask: number;
  ends: number;
  strings: number;
}
export const VERDICT_LAYOUT: RecordLayout = { mask: V_MASK, ends: V_ENDS, strings: V_STRINGS };
export const OUTCOME_LAYOUT: RecordLayout = { mask: O_MASK, ends: O_ENDS, strings: O_STRINGS };

/** Start (absolute) of string `k` of a record; -1 when it is null. */
function stringStart(r: Buffer, layout: RecordLayout, k: number): number {
  if (((r[layout.mask]! | (r[layout.mask + 1]! << 8)) >> k) & 1) return -1;
  if (k === 0) return layout.strings;
  const at = layout.ends + (k - 1) * 2;
  return layout.strings + (r[at]! | (r[at + 1]! << 8));
}

/** End (absolute, exclusive) of string `k` of a record. */
function stringEnd(r: Buffer, layout: RecordLayout, k: number): number {
  const at = layout.ends + k * 2;
  return layout.strings + (r[at]! | (r[at + 1]! << 8));
}

export const verdictStringStart = (v: Buffer, k: number): number => stringStart(v, VERDICT_LAYOUT, k);
export const verdictStringEnd = (v: Buffer, k: number): number => stringEnd(v, VERDICT_LAYOUT, k);

export function fieldOf(v: Buffer, k: number): string {
  return v.toString('utf8', verdictStringStart(v, k), verdictStringEnd(v, k));
}

/** Where a verdict record's columns (numbers, mask, string ends, strings) end and its head's template begins. */
export const verdictColumnsEnd = (v: Buffer): number => verdictStringEnd(v, F_INPUTS);

/** The string column of each row field that has one (VERDICT_STRINGS are named as the row's fields). */
const COLUMN_OF_FIELD = new Map<string, number>(VERDICT_STRINGS.map((name, k) => [name, k]));
/** A hole's column byte: this bit set when its value is escaped on the way out. */
const ESCAPED = 0x80;
/** Bytes per hole in the template's table: place (u16), column (u8), bytes written between the quotes (u16). */
const HOLE = 5;
/** JSON.stringify's short escapes of control characters (the others are \u00XX). */
const SHORT_ESCAPES: Record<number, number> = { 8: 98, 9: 116, 10: 110, 12: 102, 13: 114 };
/** Per byte: 0 copied as it is, 1 after a backslash (quote, backslash), 2 a control character. */
const ESCAPE_KIND = new Uint8Array(256).map((_, c) => (c < 32 ? 2 : c === 34 || c === 92 ? 1 : 0));
const HEX_DIGITS = Buffer.from('0123456789abcdef');

/** A row field's name as JSON.stringify writes it, kept per name (a row has the same few fields). */
const KEY_JSON = new Map<string, string>();
function keyJson(field: string): string {
  let json = KEY_JSON.get(field);
  if (json === undefined) {
    json = JSON.stringify(field);
    KEY_JSON.set(field, json);
  }
  return json;
}

/**
 * The stored head of a revealed row's line (its fields up to `outcome_id`, as JSON.stringify
 * writes them, and the comma after them): a hole count, then per hole its place in the literal,
 * its column (ESCAPED when its value needs escaping) and how many bytes its value takes written,
 * then the literal, which is the head without those values and their quotes. A string field
 * becomes a hole when it equals its column and is well-formed UTF-16 (JSON.stringify escapes a
 * lone surrogate, which the column's UTF-8 no longer holds); the others stay in the literal.
 */
function storedHead(row: Record<string, unknown>, columns: readonly (string | null)[]): Buffer {
  let literal = '';
  // The literal's length in UTF-8, kept as it grows rather than measured whole at each hole (with
  // the keys' JSON kept per name, storedVerdict 14 -> 11 us a verdict).
  let literalBytes = 0;
  const holes: number[] = [];
  let complete = false;
  for (const field in row) {
    if (field === 'outcome_id') {
      complete = true;
      break;
    }
    const value = row[field];
    // JSON.stringify leaves such a field out: the template would not be its line.
    if (value === undefined || typeof value === 'function' || typeof value === 'symbol') {
      throw new Error(`history export record: field ${field} has no JSON form`);
    }
    const key = `${literal === '' ? '{' : ','}${keyJson(field)}:`;
    literal += key;
    literalBytes += Buffer.byteLength(key);
    const json = JSON.stringify(value);
    const k = COLUMN_OF_FIELD.get(field);
    const column = k === undefined ? null : columns[k];
    if (typeof value !== 'string' || typeof column !== 'string') {
      literal += json;
      literalBytes += Buffer.byteLength(json);
    } else if (json.length === column.length + 2 && json.slice(1, -1) === column) {
      // The column is the value as the line writes it (the inputs' column, or nothing to escape).
      holes.push(literalBytes, k!, Buffer.byteLength(json) - 2);
    } else if (column === value && (value as unknown as { isWellFormed(): boolean }).isWellFormed()) {
      holes.push(literalBytes, k! | ESCAPED, Buffer.byteLength(json) - 2);
    } else {
      literal += json;
      literalBytes += Buffer.byteLength(json);
    }
  }
  if (!complete) throw new Error('history export record: the row has no outcome_id field');
  literal += ',';
  literalBytes += 1;
  const count = holes.length / 3;
  if (count > 0xff || literalBytes > 0xffff || holes.some((x) => x > 0xffff)) {
    throw new Error('history export record: head template too large');
  }
  const table = Buffer.allocUnsafe(1 + count * HOLE);
  table[0] = count;
  for (let h = 0; h < count; h++) {
    table.writeUInt16LE(holes[h * 3]!, 1 + h * HOLE);
    table[3 + h * HOLE] = holes[h * 3 + 1]!;
    table.writeUInt16LE(holes[h * 3 + 2]!, 4 + h * HOLE);
  }
  return Buffer.concat([table, Buffer.from(literal)]);
}

/** The bytes `writeHead` writes for this record. */
function headBytes(v: Buffer): number {
  const at = verdictColumnsEnd(v);
  const n = v[at]!;
  let bytes = v.length - at - 1 - n * HOLE;
  for (let h = 0; h < n; h++) bytes += (v[at + 4 + h * HOLE]! | (v[at + 5 + h * HOLE]! << 8)) + 2;
  return bytes;
}

/** Copies `v[from..to]` to `out` at `o`; returns where it ends. Short runs: a loop beats a native call. */
function copyBytes(v: Buffer, from: number, to: number, out: Buffer, o: number): number {
  if (to - from > 32) return o + v.copy(out, o, from, to);
  for (let i = from; i < to; i++) out[o++] = v[i]!;
  return o;
}

/** Writes `v[from..to]` as the inside of a JSON string, as JSON.stringify escapes it. */
function escapeBytes(v: Buffer, from: number, to: number, out: Buffer, o: number): number {
  for (let i = from; i < to; i++) {
    const c = v[i]!;
    const kind = ESCAPE_KIND[c]!;
    if (kind === 0) out[o++] = c;
    else if (kind === 1) {
      out[o++] = 92;
      out[o++] = c;
    } else {
      out[o++] = 92;
      const short = SHORT_ESCAPES[c];
      if (short !== undefined) out[o++] = short;
      else {
        out[o++] = 117; // u00XX
        out[o++] = 48;
        out[o++] = 48;
        out[o++] = HEX_DIGITS[c >> 4]!;
        out[o++] = HEX_DIGITS[c & 15]!;
      }
    }
  }
  return o;
}

/**
 * Writes the plain inputs' JSON for the escaped inputs column `v[from..to]` at `o` in `out`;
 * returns where it ends (never past `o + (to - from)`). The column is JSON.stringify's escape of
 * JSON.stringify's output, which holds no raw control character or lone surrogate, so its only
 * escapes are of quotes and backslashes; anything else is decoded as JSON would.
 */
export function unescapeInputs(v: Uint8Array, from: number, to: number, out: Uint8Array, o: number): number {
  for (let i = from; i < to; i++) {
    const c = v[i]!;
    if (c !== 92) {
      out[o++] = c;
      continue;
    }
    const next = v[i + 1]!;
    if (next === 34 || next === 92) {
      out[o++] = next;
      i++;
      continue;
    }
    // Not from this module's writer: the rest through JSON.parse (its UTF-8 is never longer).
    const rest = Buffer.from(
      JSON.parse(`"${Buffer.from(v.buffer, v.byteOffset + i, to - i).toString('utf8')}"`) as string,
    );
    out.set(rest, o);
    return o + rest.length;
  }
  return o;
}

/**
 * Writes the record's NDJSON head at `at` in `out` (room for `headBytes` assumed): the stored
 * literal with each hole's column put back between quotes. Returns where it ends. No string is
 * made of the record: short runs are copied byte by byte, long ones (the inputs) natively.
 */
function writeHead(v: Buffer, out: Buffer, at: number): number {
  const table = verdictColumnsEnd(v);
  const n = v[table]!;
  const literal = table + 1 + n * HOLE;
  let o = at;
  let from = literal;
  for (let h = 0; h < n; h++) {
    const place = literal + (v[table + 1 + h * HOLE]! | (v[table + 2 + h * HOLE]! << 8));
    const spec = v[table + 3 + h * HOLE]!;
    const k = spec & ~ESCAPED;
    o = copyBytes(v, from, place, out, o);
    from = place;
    out[o++] = 34;
    const a = verdictStringStart(v, k);
    const b = verdictStringEnd(v, k);
    o = spec & ESCAPED ? escapeBytes(v, a, b, out, o) : copyBytes(v, a, b, out, o);
    out[o++] = 34;
  }
  return copyBytes(v, from, v.length, out, o);
}

const outcomeStringStart = (o: Buffer, k: number): number => stringStart(o, OUTCOME_LAYOUT, k);
const outcomeStringEnd = (o: Buffer, k: number): number => stringEnd(o, OUTCOME_LAYOUT, k);

export function storedVerdict(verdict: Verdict): Buffer {
  const d = verdict.data;
  const revealAt = revealTime(d);
  // The row as shown once revealed, without an outcome (attached at export time).
  const row = historyRow(verdict, null, revealAt);
  const columns = [
    row.exchange,
    row.coin,
    row.timeframe,
    d.call,
    row.verdict_id,
    row.hash,
    row.stream,
    row.recorded_at,
    row.prev_hash,
    row.reveal_at,
    d.regime,
    d.feed,
    d.engineVersion,
    d.trigger,
    // As the line writes it: the JSON string's inside (F_INPUTS).
    row.inputs_json === null ? null : JSON.stringify(row.inputs_json).slice(1, -1),
  ];
  return encodeRecord(
    [revealAt, outcomeDueAt(d), d.candleCloseTime, verdict.revision, d.confidence, d.score, d.price],
    columns,
    storedHead(row as unknown as Record<string, unknown>, columns),
  );
}

/**
 * The outcome the export attaches to its verdict: the first event of the verdict's outcome stream
 * (what the log scan reads), or null for any other outcome event. Stored keyed by the verdict's id.
 */
export function storedOutcome(outcome: Outcome): Buffer | null {
  if (outcome.revision !== 0 || outcome.stream !== outcomeStream(outcome.data.verdictId)) return null;
  const o = outcome.data;
  const tail = JSON.stringify({
    outcome_id: outcome.id,
    return_1: o.return1,
    return_6: o.return6,
    return_24: o.return24,
    result: o.result,
    net_centi_bps: o.netCentiBps,
    mae_bps: o.maeBps,
    mfe_bps: o.mfeBps,
    realised_vol: o.realisedVol,
    lean: o.lean ?? null,
    lean_net_centi_bps: o.leanNetCentiBps ?? null,
    outcome_hash: o.hash ?? null,
    outcome_prev_hash: o.hash ? (o.prevHash ?? null) : null,
    outcome_position: o.hash ? outcome.position : null,
  }).slice(1);
  const num = (x: number | null | undefined) => (x === null || x === undefined ? Number.NaN : x);
  return encodeRecord(
    [
      o.return1,
      o.return6,
      o.return24,
      num(o.netCentiBps),
      num(o.maeBps),
      num(o.mfeBps),
      o.realisedVol,
      num(o.leanNetCentiBps),
      o.hash ? outcome.position : Number.NaN,
    ],
    [
      o.verdictHash,
      outcome.id,
      o.result,
      o.lean ?? null,
      o.hash ?? null,
      o.hash ? (o.prevHash ?? null) : null,
    ],
    tail,
  );
}

/**
 * The reveal rule on stored bytes (rows.ts `shownLabel`): false while the verdict is younger
 * than its reveal time; once revealed, the outcome to attach (due, and labelling exactly this
 * content) or null.
 */
export function shownStoredLabel(
  v: Buffer,
  outcome: Buffer | null | undefined,
  now: number,
): Buffer | null | false {
  if (now < revealAtOf(v)) return false;
  if (!outcome) return null;
  const a = verdictStringStart(v, F_HASH);
  const b = outcomeStringStart(outcome, O_HASH);
  const length = verdictStringEnd(v, F_HASH) - a;
  const same =
    b >= 0 &&
    outcomeStringEnd(outcome, O_HASH) - b === length &&
    v.compare(outcome, b, b + length, a, a + length) === 0;
  return same ? outcome : null;
}

/** Where an outcome record's columns end and its NDJSON tail begins. */
export const outcomeColumnsEnd = (o: Buffer): number => outcomeStringEnd(o, OUTCOME_STRINGS.length - 1);

/** The tail of an outcome record: the row's outcome fields as NDJSON. */
export function tailOf(outcome: Buffer): Buffer {
  return outcome.subarray(outcomeColumnsEnd(outcome));
}

/** Where the cursor field begins, after the tail's last field: `,"cursor":"`. */
const CURSOR_FIELD = Buffer.from(',"cursor":"');

/**
 * A revealed row as stored bytes: its line is the verdict's head, `tail` without its closing
 * brace, the row's cursor field (`,"cursor":"…"}`: the last column, made from the row's log
 * position and id at export time, so no stored record changes), then a line break.
 */
export class StoredLine {
  constructor(
    readonly verdict: Buffer,
    readonly tail: Uint8Array,
    /** Base64url: nothing in it to escape, one byte a character. */
    readonly cursor: string,
  ) {}
  get byteLength(): number {
    return headBytes(this.verdict) + this.tail.length - 1 + CURSOR_FIELD.length + this.cursor.length + 3;
  }
  /** Writes the line at `at` in `out` (room for `byteLength` assumed); returns where it ends. */
  writeTo(out: Buffer, at: number): number {
    let o = writeHead(this.verdict, out, at);
    out.set(this.tail.subarray(0, this.tail.length - 1), o);
    o += this.tail.length - 1;
    o += CURSOR_FIELD.copy(out, o);
    o += out.write(this.cursor, o, 'latin1');
    out[o++] = 34;
    out[o++] = 125;
    out[o++] = 10;
    return o;
  }
  /** The line, line break included, as a buffer of its own. */
  toBuffer(): Buffer {
    const out = Buffer.allocUnsafe(this.byteLength);
    this.writeTo(out, 0);
    return out;
  }
}
