import { createHash } from 'node:crypto';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, revealTime } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';
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
  /**
   * `into`: memory to copy the records into (as far as it holds them), for a caller done with the
   * records of its previous read; without it, each record keeps bytes of its own.
   */
  verdictsAfter(after: number, upTo: number, limit: number, into?: Buffer): StoredVerdictEntry[];
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
 * The head is not stored as it is written, though. Its string values are the record's string
 * columns again, and most of it is the verdict's inputs, a JSON record written as an escaped
 * JSON string whose names every verdict repeats. So the head is a template shared
 * by every verdict of its shape (`HeadTemplate`: the field names, the inputs' names escaped,
 * where each value goes), stored once by the store, and the record holds only the values: its
 * columns, and its texts, each number as JSON.stringify wrote it (so it prints byte for byte as
 * the line has it: a float written from its float64 would cost a number-to-text conversion per value)
 * and each input's value as the inside of the line's JSON string has it (a string escaped once
 * more, as the line escapes it). `writeHead` puts the line back together, escaping only the
 * columns whose value needs it; Parquet, which wants the inputs' JSON plain, writes it from the
 * template's plain pieces and the texts while packing rows (`writeInputs`), on the thread that
 * waits for the encoder anyway.
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
 * then the id of the head's template (6 bytes), the texts' total bytes (u16) and each text
 * after its length (`encodeTexts`). Parquet copies the strings' bytes straight into its columns;
 * NDJSON writes the head from the template, them and the texts.
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
 * The inputs' JSON column: stored empty (the inputs are the record's texts, `headOf`); Parquet's
 * packed rows hold the plain JSON there (`writeInputs`).
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

/** Where a verdict record's columns (numbers, mask, string ends, strings) end and its template's id begins. */
export const verdictColumnsEnd = (v: Buffer): number => verdictStringEnd(v, F_INPUTS);

/** The string column of each row field that has one (VERDICT_STRINGS are named as the row's fields). */
const COLUMN_OF_FIELD = new Map<string, number>(VERDICT_STRINGS.map((name, k) => [name, k]));
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

/** The inside of the JSON string JSON.stringify writes for `text`. */
const escaped = (text: string): string => JSON.stringify(text).slice(1, -1);

/** A hole of a head template: a string column, copied between the quotes the literal holds. */
const H_COLUMN = 0;
/** A string column escaped on the way out (its value holds a quote, a backslash or a control character). */
const H_COLUMN_ESCAPED = 1;
/** The record's next text, copied: a number's JSON (or a string no column holds), or an input's value. */
const H_TEXT = 2;

/**
 * The head of a revealed row's line with its values cut out, shared by every verdict of the same
 * shape (the row's fields, the inputs' names in order, which values are strings, which are null):
 * a literal (every field name, the inputs' names escaped as the line writes them, the quotes, the
 * nulls and booleans) and where each value goes in it. A record names its template by `id`, the
 * first 6 bytes of the SHA-256 of `bytes`, the template's stored form: templates are written once
 * to a database of their own (export-row-store.ts) and never change, so a record read back in any
 * process finds the same one.
 */
export interface HeadTemplate {
  readonly id: number;
  /** The stored form: JSON of { lit, holes, inputsFirst, pieces }. */
  readonly bytes: Buffer;
  readonly lit: Buffer;
  /** Per hole: its place in `lit`, its kind (H_*) and its column (column holes). */
  readonly holes: Int32Array;
  /** Every non-null column but the (empty) inputs' is an H_COLUMN hole: see `headBytes`. */
  readonly plainColumns: boolean;
  /** The texts of the inputs' values: texts inputsFirst to inputsFirst + pieces.length - 2. */
  readonly inputsFirst: number;
  /** The inputs' plain JSON around its values (`{"rsi":`, `,"macd":`, ..., `}`), for Parquet. */
  readonly pieces: readonly Buffer[];
  readonly piecesBytes: number;
}

interface StoredTemplate {
  lit: string;
  holes: number[];
  /** Every non-null column but the inputs' is an H_COLUMN hole. */
  plain: boolean;
  inputsFirst: number;
  pieces: string[];
}

/** Templates this process knows, by id. */
const TEMPLATES = new Map<number, HeadTemplate>();
/** Templates by shape (`headOf`): a verdict of a shape already met needs no stored form built. */
const TEMPLATE_OF_SHAPE = new Map<string, HeadTemplate>();

function makeTemplate(form: string, bytes: Buffer, id: number): HeadTemplate {
  const t = JSON.parse(form) as StoredTemplate;
  const holes = Int32Array.from(t.holes);
  const pieces = t.pieces.map((p) => Buffer.from(p));
  return {
    id,
    bytes,
    lit: Buffer.from(t.lit),
    holes,
    plainColumns: t.plain,
    inputsFirst: t.inputsFirst,
    pieces,
    piecesBytes: pieces.reduce((n, p) => n + p.length, 0),
  };
}

const idOfTemplate = (bytes: Buffer): number => createHash('sha256').update(bytes).digest().readUIntLE(0, 6);

/** The template of a stored form, known to this process from now on. */
function templateOfForm(form: string): HeadTemplate {
  const bytes = Buffer.from(form);
  return learnTemplate(idOfTemplate(bytes), bytes);
}

/**
 * Test only: forgets every template this process knows, as a process that starts on a stored
 * directory does, so records read back must find theirs in the store (`learnTemplate`).
 */
export function forgetTemplates(): void {
  TEMPLATES.clear();
  TEMPLATE_OF_SHAPE.clear();
  lastTemplate = null;
}

/** Whether this process knows template `id` (records naming another need `learnTemplate` first). */
export const knowsTemplate = (id: number): boolean => TEMPLATES.has(id);

/** Makes template `id` known from its stored form (read back from the store). */
export function learnTemplate(id: number, bytes: Buffer): HeadTemplate {
  const known = TEMPLATES.get(id);
  if (known !== undefined) {
    if (!known.bytes.equals(bytes)) throw new Error(`history export record: two templates share id ${id}`);
    return known;
  }
  if (idOfTemplate(bytes) !== id)
    throw new Error(`history export record: template ${id} does not match its id`);
  const t = makeTemplate(bytes.toString('utf8'), Buffer.from(bytes), id);
  TEMPLATES.set(id, t);
  return t;
}

/** The stored form of template `id` (known to this process). */
export function templateBytes(id: number): Buffer {
  const t = TEMPLATES.get(id);
  if (t === undefined) throw new Error(`history export record: template ${id} is not known`);
  return t.bytes;
}

/** The template id a verdict record names (after its columns). */
export const templateIdOf = (v: Buffer): number => v.readUIntLE(verdictColumnsEnd(v), 6);

let lastTemplate: HeadTemplate | null = null;
/** The template of the record whose columns end at `c`. */
function templateAt(v: Buffer, c: number): HeadTemplate {
  const id = v.readUIntLE(c, 6);
  if (lastTemplate !== null && lastTemplate.id === id) return lastTemplate;
  const t = TEMPLATES.get(id);
  if (t === undefined) throw new Error(`history export record: template ${id} is not known`);
  lastTemplate = t;
  return t;
}

/** After a record's columns: its template's id (6 bytes), then its texts' total bytes (u16). */
const TEXTS_AT = 8;

/**
 * The head of a revealed row's line as a template and the texts that fill it (`buildHead`). Per
 * verdict only the texts and a short key of its shape are made (which columns are null, each
 * field's name and whether its value is a column hole, escaped or not, a text or part of the
 * literal, and the inputs' names): everything the template depends on. The template itself, about
 * 2 KB of JSON to make and look up, is built only for a shape not met before.
 */
function headOf(
  row: Record<string, unknown>,
  columns: readonly (string | null)[],
  inputs: Record<string, unknown>,
): { template: HeadTemplate; texts: string[] } {
  let mask = 0;
  for (let k = 0; k < columns.length; k++) if (columns[k] === null) mask |= 1 << k;
  // Each part is self-delimiting: names as JSON strings, a kind letter, a column number, a literal's JSON.
  let shape = `${mask}`;
  const texts: string[] = [];
  let complete = false;
  for (const field in row) {
    if (field === 'outcome_id') {
      complete = true;
      break;
    }
    const value = row[field];
    if (value === undefined || typeof value === 'function' || typeof value === 'symbol') {
      throw new Error(`history export record: field ${field} has no JSON form`);
    }
    shape += keyJson(field);
    if (field === 'inputs_json' && typeof value === 'string') {
      shape += 'i';
      let plain = '{';
      for (const key of Object.keys(inputs)) {
        const name = JSON.stringify(key);
        const json = JSON.stringify(inputs[key]);
        shape += name;
        plain += `${plain === '{' ? '' : ','}${name}:${json}`;
        texts.push(typeof inputs[key] === 'string' ? escaped(json) : json);
      }
      plain += '}';
      shape += '}';
      if (plain !== value) throw new Error('history export record: the inputs are not a plain JSON record');
      continue;
    }
    const json = JSON.stringify(value);
    const k = COLUMN_OF_FIELD.get(field);
    const column = k === undefined ? null : columns[k];
    if (typeof value === 'string' && typeof column === 'string') {
      if (json.length === column.length + 2 && json.slice(1, -1) === column) {
        shape += `c${k}`;
        continue;
      }
      if (column === value && (value as unknown as { isWellFormed(): boolean }).isWellFormed()) {
        shape += `e${k}`;
        continue;
      }
    }
    if (typeof value === 'string' || typeof value === 'number') {
      shape += 't';
      texts.push(json);
    } else shape += `l${json}`;
  }
  if (!complete) throw new Error('history export record: the row has no outcome_id field');
  let template = TEMPLATE_OF_SHAPE.get(shape);
  if (template === undefined) {
    const built = buildHead(row, columns, inputs);
    if (built.texts.length !== texts.length || built.texts.some((t, i) => t !== texts[i]))
      throw new Error('history export record: a head differs from its shape');
    template = built.template;
    TEMPLATE_OF_SHAPE.set(shape, template);
  }
  return { template, texts };
}

/**
 * The head of a revealed row's line (its fields up to `outcome_id`, as JSON.stringify writes
 * them, and the comma after them) as a template and the texts that fill it: string fields are
 * holes for their columns (escaped when their value needs it and is well-formed UTF-16, as
 * JSON.stringify escapes a lone surrogate the column's UTF-8 no longer holds; else a text),
 * numbers are texts (their JSON, so they print as JSON.stringify printed them), nulls and
 * booleans stay in the literal, and the inputs' JSON string is written key by key: its names in
 * the literal, its values as texts, each as the inside of the line's JSON string has it.
 */
function buildHead(
  row: Record<string, unknown>,
  columns: readonly (string | null)[],
  inputs: Record<string, unknown>,
): { template: HeadTemplate; texts: string[] } {
  let lit = '';
  // The literal's length in UTF-8, kept as it grows rather than measured whole at each hole.
  let litBytes = 0;
  const add = (s: string) => {
    lit += s;
    litBytes += Buffer.byteLength(s);
  };
  const holes: number[] = [];
  const texts: string[] = [];
  const pieces: string[] = [];
  let inputsFirst = -1;
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
    add(`${lit === '' ? '{' : ','}${keyJson(field)}:`);
    if (field === 'inputs_json' && typeof value === 'string') {
      // The inputs' JSON, rebuilt from its names and values, must be the row's exactly.
      inputsFirst = texts.length;
      let plain = '';
      let piece = '{';
      add('"');
      for (const key of Object.keys(inputs)) {
        piece += `${JSON.stringify(key)}:`;
        add(escaped(piece));
        pieces.push(piece);
        plain += piece;
        holes.push(litBytes, H_TEXT, 0);
        const json = JSON.stringify(inputs[key]);
        plain += json;
        texts.push(typeof inputs[key] === 'string' ? escaped(json) : json);
        piece = ',';
      }
      piece = piece === '{' ? '{}' : '}';
      add(`${escaped(piece)}"`);
      pieces.push(piece);
      plain += piece;
      if (plain !== value) throw new Error('history export record: the inputs are not a plain JSON record');
      continue;
    }
    const json = JSON.stringify(value);
    const k = COLUMN_OF_FIELD.get(field);
    const column = k === undefined ? null : columns[k];
    if (typeof value === 'string' && typeof column === 'string') {
      if (json.length === column.length + 2 && json.slice(1, -1) === column) {
        add('"');
        holes.push(litBytes, H_COLUMN, k!);
        add('"');
        continue;
      }
      if (column === value && (value as unknown as { isWellFormed(): boolean }).isWellFormed()) {
        add('"');
        holes.push(litBytes, H_COLUMN_ESCAPED, k!);
        add('"');
        continue;
      }
    }
    if (typeof value === 'string' || typeof value === 'number') {
      holes.push(litBytes, H_TEXT, 0);
      texts.push(json);
    } else add(json);
  }
  if (!complete) throw new Error('history export record: the row has no outcome_id field');
  add(',');
  if (litBytes > 0xffff || holes.length / 3 > 0xffff)
    throw new Error('history export record: head template too large');
  // Which columns the holes write, for `headBytes`: all of them, unescaped, in the usual case.
  const written = new Set<number>();
  for (let h = 0; h < holes.length; h += 3) if (holes[h + 1] === H_COLUMN) written.add(holes[h + 2]!);
  const plain = columns.every((column, k) => column === null || k === F_INPUTS || written.has(k));
  const stored: StoredTemplate = { lit, holes, plain, inputsFirst, pieces };
  return { template: templateOfForm(JSON.stringify(stored)), texts };
}

/** The bytes after a verdict record's columns: its template's id, its texts' total bytes, each text after its length. */
function encodeTexts(template: HeadTemplate, texts: readonly string[]): Buffer {
  const bytes = texts.map((t) => Buffer.from(t));
  const total = bytes.reduce((n, b) => n + b.length, 0);
  if (total > 0xffff) throw new Error('history export record: texts over 64 KiB');
  const out = Buffer.allocUnsafe(TEXTS_AT + total + bytes.reduce((n, b) => n + (b.length < 0x80 ? 1 : 2), 0));
  out.writeUIntLE(template.id, 0, 6);
  out.writeUInt16LE(total, 6);
  let o = TEXTS_AT;
  for (const b of bytes) {
    // A length below 128 in one byte, else in two (low 7 bits with the high bit set, then the rest).
    if (b.length < 0x80) out[o++] = b.length;
    else {
      if (b.length >= 0x8000) throw new Error('history export record: a text over 32 KiB');
      out[o++] = (b.length & 0x7f) | 0x80;
      out[o++] = b.length >> 7;
    }
    o += b.copy(out, o);
  }
  return out;
}

/** The bytes `writeHead` writes for this record. */
function headBytes(v: Buffer): number {
  const c = verdictColumnsEnd(v);
  const t = templateAt(v, c);
  const texts = v[c + 6]! | (v[c + 7]! << 8);
  // Every non-null column but the (empty) inputs' is a plain hole: the columns' bytes all go out.
  if (t.plainColumns) return t.lit.length + texts + (c - V_STRINGS);
  let n = t.lit.length + texts;
  const holes = t.holes;
  for (let h = 0; h < holes.length; h += 3) {
    const kind = holes[h + 1]!;
    if (kind === H_TEXT) continue;
    const k = holes[h + 2]!;
    const a = verdictStringStart(v, k);
    const b = verdictStringEnd(v, k);
    n += kind === H_COLUMN ? b - a : escapedBytes(v, a, b);
  }
  return n;
}

/** Copies `v[from..to]` to `out` at `o`; returns where it ends. Short runs: a loop beats a native call. */
function copyBytes(v: Uint8Array, from: number, to: number, out: Uint8Array, o: number): number {
  if (to - from > 32) {
    out.set(v.subarray(from, to), o);
    return o + to - from;
  }
  for (let i = from; i < to; i++) out[o++] = v[i]!;
  return o;
}

/** The bytes `escapeBytes` writes for `v[from..to]`. */
function escapedBytes(v: Buffer, from: number, to: number): number {
  let n = to - from;
  for (let i = from; i < to; i++) {
    const kind = ESCAPE_KIND[v[i]!]!;
    if (kind === 1) n += 1;
    else if (kind === 2) n += SHORT_ESCAPES[v[i]!] === undefined ? 5 : 1;
  }
  return n;
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
 * Writes the plain JSON of the escaped text `v[from..to]` (the inside of a JSON string as
 * JSON.stringify writes it) at `o` in `out`; returns where it ends (never past `o + (to - from)`).
 * An input's text is JSON.stringify's escape of JSON.stringify's output, which holds no raw
 * control character or lone surrogate, so its only escapes are of quotes and backslashes;
 * anything else is decoded as JSON would.
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

/** A DataView of the last buffer met in each role (records, literals, output chunks), by its ArrayBuffer. */
const viewed: (ArrayBufferLike | null)[] = [null, null, null];
const views: DataView[] = viewed.map(() => new DataView(new ArrayBuffer(0)));
const RECORDS = 0;
const LITERALS = 1;
const OUTPUT = 2;
function viewOf(b: Uint8Array, role: number): DataView {
  if (viewed[role] !== b.buffer) {
    viewed[role] = b.buffer;
    views[role] = new DataView(b.buffer);
  }
  return views[role]!;
}

/**
 * Copies bytes `from..to` of `s` to `d` at `o` (offsets in their ArrayBuffers), four at a time: a
 * head's runs are 10-20 bytes, too short for a native copy to pay, and a byte loop copied them at
 * a third more CPU. Read and written little-endian, the machine's order: big-endian (DataView's
 * default) swapped each word twice, and writing the lines took about a sixth more CPU.
 * Returns where it ends.
 */
function copyWords(s: DataView, from: number, to: number, d: DataView, o: number): number {
  let i = from;
  for (; i + 8 <= to; i += 8, o += 8) {
    d.setUint32(o, s.getUint32(i, true), true);
    d.setUint32(o + 4, s.getUint32(i + 4, true), true);
  }
  if (i + 4 <= to) {
    d.setUint32(o, s.getUint32(i, true), true);
    i += 4;
    o += 4;
  }
  for (; i < to; i++) d.setUint8(o++, s.getUint8(i));
  return o;
}

/**
 * Writes the record's NDJSON head at `at` in `out` (room for `headBytes` assumed): its template's
 * literal with each hole filled, from a column or the record's next text. Returns where it ends.
 * No string is made of the record: the runs are copied a word at a time (`copyWords`).
 */
function writeHead(v: Buffer, out: Buffer, at: number): number {
  const c = verdictColumnsEnd(v);
  const t = templateAt(v, c);
  const lit = t.lit;
  const holes = t.holes;
  const record = viewOf(v, RECORDS);
  const literal = viewOf(lit, LITERALS);
  const output = viewOf(out, OUTPUT);
  // Offsets in the ArrayBuffers the views span.
  const vb = v.byteOffset;
  const lb = lit.byteOffset;
  const ob = out.byteOffset;
  let p = c + TEXTS_AT;
  let o = at + ob;
  let from = 0;
  for (let h = 0; h < holes.length; h += 3) {
    const place = holes[h]!;
    const kind = holes[h + 1]!;
    o = copyWords(literal, lb + from, lb + place, output, o);
    from = place;
    if (kind === H_TEXT) {
      let n = v[p++]!;
      if (n & 0x80) n = (n & 0x7f) | (v[p++]! << 7);
      o = copyWords(record, vb + p, vb + p + n, output, o);
      p += n;
    } else {
      const k = holes[h + 2]!;
      const a = verdictStringStart(v, k);
      const b = verdictStringEnd(v, k);
      o =
        kind === H_COLUMN
          ? copyWords(record, vb + a, vb + b, output, o)
          : escapeBytes(v, a, b, out, o - ob) + ob;
    }
  }
  return copyWords(literal, lb + from, lb + lit.length, output, o) - ob;
}

/** An upper bound on the bytes of the plain inputs' JSON `writeInputs` writes for this record. */
export function inputsBytesAtMost(v: Buffer): number {
  const c = verdictColumnsEnd(v);
  return templateAt(v, c).piecesBytes + (v[c + 6]! | (v[c + 7]! << 8));
}

/**
 * Writes the verdict's inputs as plain JSON (Parquet's inputs column) at `o` in `out`: the
 * template's pieces around the input texts, a string's unescaped. Returns where it ends.
 */
export function writeInputs(v: Buffer, out: Uint8Array, o: number): number {
  const c = verdictColumnsEnd(v);
  const t = templateAt(v, c);
  if (t.inputsFirst < 0) return o;
  let p = c + TEXTS_AT;
  const last = t.inputsFirst + t.pieces.length - 1;
  for (let i = 0; i < last; i++) {
    let n = v[p++]!;
    if (n & 0x80) n = (n & 0x7f) | (v[p++]! << 7);
    if (i >= t.inputsFirst) {
      o = copyBytes(t.pieces[i - t.inputsFirst]!, 0, t.pieces[i - t.inputsFirst]!.length, out, o);
      // A string's text is escaped as the line writes it (it begins with \"); the others are as they are.
      o = v[p] === 92 ? unescapeInputs(v, p, p + n, out, o) : copyBytes(v, p, p + n, out, o);
    }
    p += n;
  }
  const end = t.pieces.at(-1)!;
  return copyBytes(end, 0, end.length, out, o);
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
    // Empty: the inputs are the record's texts (F_INPUTS).
    '',
  ];
  const { template, texts } = headOf(row as unknown as Record<string, unknown>, columns, d.inputs);
  return encodeRecord(
    [revealAt, outcomeDueAt(d), d.candleCloseTime, verdict.revision, d.confidence, d.score, d.price],
    columns,
    encodeTexts(template, texts),
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
/** Base64url's alphabet, as byte values. */
const BASE64URL = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_');
/** The cursor's text before it is base64url-encoded (cursor.ts): `h2:<position>:<tag>`, at most 32 bytes. */
const cursorText = new Uint8Array(40);
/** Bytes of a UUID, and where its last group (the tag) begins. */
const UUID_BYTES = 36;
const TAG_AT = 24;

/**
 * The length of the text `encodeCursor(position, id)` encodes, when it can be written from the
 * record's bytes (`writeCursor`): a whole position and a UUID id, which `encodeCursor` tags with its
 * last group; -1 otherwise.
 */
function cursorTextBytes(v: Buffer, position: number): number {
  if (!Number.isSafeInteger(position) || position < 0) return -1;
  const a = verdictStringStart(v, F_ID);
  if (a < 0 || verdictStringEnd(v, F_ID) - a !== UUID_BYTES || v[a + TAG_AT - 1] !== 45) return -1;
  // ASCII throughout (36 bytes are 36 characters, as encodeCursor counts), no dash in the tag.
  for (let i = a; i < a + UUID_BYTES; i++) if (v[i]! >= 0x80 || (i >= a + TAG_AT && v[i] === 45)) return -1;
  let digits = 1;
  for (let p = position; p >= 10; p = Math.floor(p / 10)) digits++;
  return 3 + digits + 1 + (UUID_BYTES - TAG_AT);
}

/**
 * Writes `encodeCursor(position, id)` at `o` in `out` from the record's id bytes, `n` its text's
 * length (`cursorTextBytes`): no string is made of the id, the text or its base64url. Returns where
 * it ends.
 */
function writeCursor(v: Buffer, position: number, n: number, out: Buffer, o: number): number {
  const text = cursorText;
  text[0] = 104; // h2:
  text[1] = 50;
  text[2] = 58;
  let t = n - (UUID_BYTES - TAG_AT) - 1;
  text[t] = 58;
  for (let p = position, i = t - 1; i >= 3; i--, p = Math.floor(p / 10)) text[i] = 48 + (p % 10);
  const tag = verdictStringStart(v, F_ID) + TAG_AT;
  for (let i = 0; i < UUID_BYTES - TAG_AT; i++) text[++t] = v[tag + i]!;
  let i = 0;
  for (; i + 3 <= n; i += 3) {
    const x = (text[i]! << 16) | (text[i + 1]! << 8) | text[i + 2]!;
    out[o++] = BASE64URL[x >> 18]!;
    out[o++] = BASE64URL[(x >> 12) & 63]!;
    out[o++] = BASE64URL[(x >> 6) & 63]!;
    out[o++] = BASE64URL[x & 63]!;
  }
  // No padding, as Buffer's base64url writes it.
  if (n - i === 1) {
    const x = text[i]!;
    out[o++] = BASE64URL[x >> 2]!;
    out[o++] = BASE64URL[(x & 3) << 4]!;
  } else if (n - i === 2) {
    const x = (text[i]! << 8) | text[i + 1]!;
    out[o++] = BASE64URL[x >> 10]!;
    out[o++] = BASE64URL[(x >> 4) & 63]!;
    out[o++] = BASE64URL[(x & 15) << 2]!;
  }
  return o;
}

/** Characters (bytes) of the base64url of `n` bytes, without padding. */
const base64urlLength = (n: number): number => Math.floor((n * 4 + 2) / 3);

/**
 * A revealed row as stored bytes: its line is the verdict's head, `tail` without its closing
 * brace, the row's cursor field (`,"cursor":"…"}`: the last column, made from the row's log
 * position and id at export time, so no stored record changes), then a line break.
 */
export class StoredLine {
  /** The length of the cursor's text written from the record (`cursorTextBytes`), or -1. */
  private readonly cursorText: number;
  /** Base64url: nothing in it to escape, one byte a character. */
  private cursorString: string | null;
  /**
   * `cursor`: the row's cursor as text; or null, and the cursor is written from `position` and the
   * record's id as `encodeCursor` writes it, without making a string per row.
   */
  constructor(
    readonly verdict: Buffer,
    readonly tail: Uint8Array,
    cursor: string | null,
    private readonly position = 0,
  ) {
    this.cursorString = cursor;
    this.cursorText = cursor === null ? cursorTextBytes(verdict, position) : -1;
  }
  /** The row's cursor (cursor.ts). */
  get cursor(): string {
    this.cursorString ??= encodeCursor(this.position, fieldOf(this.verdict, F_ID));
    return this.cursorString;
  }
  private get cursorBytes(): number {
    return this.cursorText >= 0 ? base64urlLength(this.cursorText) : this.cursor.length;
  }
  get byteLength(): number {
    return headBytes(this.verdict) + this.tail.length - 1 + CURSOR_FIELD.length + this.cursorBytes + 3;
  }
  /** Writes the line at `at` in `out` (room for `byteLength` assumed); returns where it ends. */
  writeTo(out: Buffer, at: number): number {
    let o = writeHead(this.verdict, out, at);
    out.set(this.tail.subarray(0, this.tail.length - 1), o);
    o += this.tail.length - 1;
    o += CURSOR_FIELD.copy(out, o);
    if (this.cursorText >= 0) o = writeCursor(this.verdict, this.position, this.cursorText, out, o);
    else o += out.write(this.cursor, o, 'latin1');
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
