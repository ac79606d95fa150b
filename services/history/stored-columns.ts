import { HISTORY_COLUMNS, HISTORY_CONTENT_COLUMNS, type HistoryRow } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';
import {
  F_ID,
  F_INPUTS,
  fieldOf,
  inputsBytesAtMost,
  OUTCOME_LAYOUT,
  OUTCOME_NUMBERS,
  OUTCOME_STRINGS,
  outcomeColumnsEnd,
  VERDICT_LAYOUT,
  VERDICT_NUMBERS,
  VERDICT_STRINGS,
  verdictColumnsEnd,
  verdictStringStart,
  writeInputs,
} from './export-rows.ts';
import type { PackedRows, StoredPlan } from './stored-table.mjs';

/**
 * A row for the Parquet writer as stored bytes (export-rows.ts): the verdict's record and the
 * label the reveal rule gave it at the scan's clock (`shownStoredLabel`: false = commitment only).
 */
export interface StoredRef {
  position: number;
  v: Buffer;
  label: Buffer | null | false;
}

type Source =
  | {
      from: 'verdict';
      kind: 'utf8' | 'float64' | 'int64' | 'int32' | 'timestamp';
      k: number;
      content: boolean;
      /** A string column holding an ISO 8601 time, written as a TIMESTAMP. */
      time?: boolean;
    }
  | { from: 'outcome'; kind: 'utf8' | 'float64' | 'int64'; k: number }
  | { from: 'position' | 'revealed' | 'cursor' };

/** A verdict column outside the content (HISTORY_CONTENT_COLUMNS) is its commitment's, which every row shows. */
const CONTENT: ReadonlySet<keyof HistoryRow> = new Set(HISTORY_CONTENT_COLUMNS);
const NUMBER_KIND: Partial<Record<keyof HistoryRow, 'int64' | 'int32' | 'float64' | 'timestamp'>> = {
  revision: 'int64',
  confidence: 'int32',
  candle_close_time: 'timestamp',
  reveal_at: 'timestamp',
  // Held as ISO 8601 text in the record, written as a time.
  recorded_at: 'timestamp',
  net_centi_bps: 'int64',
  lean_net_centi_bps: 'int64',
  outcome_position: 'int64',
};
const VERDICT_NUMBER_OF: Partial<Record<keyof HistoryRow, (typeof VERDICT_NUMBERS)[number]>> = {
  revision: 'revision',
  confidence: 'confidence',
  score: 'score',
  price: 'price',
  candle_close_time: 'candleCloseTime',
  reveal_at: 'revealAt',
};

/** Where each column of HISTORY_COLUMNS comes from in the stored records. */
const SOURCES: Source[] = HISTORY_COLUMNS.map((name): Source => {
  if (name === 'position') return { from: 'position' };
  if (name === 'revealed') return { from: 'revealed' };
  if (name === 'cursor') return { from: 'cursor' };
  const content = CONTENT.has(name);
  // A time the record holds as a number (the reveal time) is read as one, not parsed from its text.
  const vn = VERDICT_NUMBER_OF[name];
  if (vn) {
    const k = (VERDICT_NUMBERS as readonly string[]).indexOf(vn);
    return { from: 'verdict', kind: NUMBER_KIND[name] ?? 'float64', k, content };
  }
  const vs = (VERDICT_STRINGS as readonly string[]).indexOf(name);
  if (vs >= 0) {
    return { from: 'verdict', kind: 'utf8', k: vs, content, time: NUMBER_KIND[name] === 'timestamp' };
  }
  const os = (OUTCOME_STRINGS as readonly string[]).indexOf(name);
  if (os >= 0) return { from: 'outcome', kind: 'utf8', k: os };
  const on = (OUTCOME_NUMBERS as readonly string[]).indexOf(name);
  if (on >= 0) return { from: 'outcome', kind: NUMBER_KIND[name] === 'int64' ? 'int64' : 'float64', k: on };
  throw new Error(`history column ${name} has no stored source`);
});

/** Where every column's values are read: for storedTable, on whichever thread builds the table. */
export const STORED_PLAN: StoredPlan = (() => {
  const strings: { c: number; source: Source & { k: number } }[] = [];
  const numbers: { c: number; source: Source & { k: number; kind: string } }[] = [];
  SOURCES.forEach((source, c) => {
    if (!('k' in source)) return;
    if (source.kind === 'utf8') strings.push({ c, source });
    else numbers.push({ c, source });
  });
  const content = (source: Source) => source.from === 'verdict' && source.content;
  return {
    columns: [...HISTORY_COLUMNS],
    stringColumn: strings.map(({ c }) => c),
    stringK: strings.map(({ source }) => source.k),
    stringFromOutcome: strings.map(({ source }) => source.from === 'outcome'),
    stringContent: strings.map(({ source }) => content(source)),
    stringTime: strings.map(({ source }) => source.from === 'verdict' && source.time === true),
    numberColumn: numbers.map(({ c }) => c),
    numberK: numbers.map(({ source }) => source.k),
    numberFromOutcome: numbers.map(({ source }) => source.from === 'outcome'),
    numberContent: numbers.map(({ source }) => content(source)),
    numberKind: numbers.map(({ source }) => source.kind as 'float64' | 'int64' | 'int32' | 'timestamp'),
    positionColumn: HISTORY_COLUMNS.indexOf('position'),
    cursorColumn: HISTORY_COLUMNS.indexOf('cursor'),
    revealedColumn: HISTORY_COLUMNS.indexOf('revealed'),
    verdict: { ...VERDICT_LAYOUT },
    outcome: { ...OUTCOME_LAYOUT },
  };
})();

/** Commitment / revealed without an outcome, as PackedRows.outcomeAt says them. */
const COMMITMENT_ROW = -1;
const NO_OUTCOME_ROW = -2;
const align8 = (n: number) => (n + 7) & ~7;

/**
 * A row group's stored rows copied into one buffer, each record at a multiple of 8: one copy per
 * record, so that building the columns (storedTable) can run on the Parquet worker, which takes
 * the buffer over instead of thousands of small ones. Only the records' columns are copied, not
 * the NDJSON head's template and the tail that follow them.
 */
export function packRows(refs: readonly StoredRef[]): PackedRows {
  const n = refs.length;
  const vEnds = new Int32Array(n);
  const oEnds = new Int32Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    const { v, label } = refs[i]!;
    vEnds[i] = verdictColumnsEnd(v);
    oEnds[i] = label ? outcomeColumnsEnd(label) : 0;
    total += align8(vEnds[i]! + inputsBytesAtMost(v)) + align8(oEnds[i]!);
  }
  // Its own ArrayBuffer (never a pooled slice), so that it can be transferred.
  const bytes = new Uint8Array(new ArrayBuffer(total));
  const verdictAt = new Int32Array(n);
  const outcomeAt = new Int32Array(n);
  const positions = new Float64Array(n);
  // Each row's cursor (its position and its id's tag), made on this thread where the cursor code
  // is, as one ASCII column the table builder takes over as it is.
  const cursors = refs.map(({ position, v }) => encodeCursor(position, fieldOf(v, F_ID)));
  const cursorOffsets = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) cursorOffsets[i + 1] = cursorOffsets[i]! + cursors[i]!.length;
  const cursorData = new Uint8Array(new ArrayBuffer(cursorOffsets[n]!));
  Buffer.from(cursorData.buffer).write(cursors.join(''), 'latin1');
  let at = 0;
  for (let i = 0; i < n; i++) {
    const { position, v, label } = refs[i]!;
    positions[i] = position;
    // The columns as they are, and the inputs' plain JSON written from the record's texts into
    // its inputs column (empty in the record, and the last string: only its end offset changes).
    const vEnd = vEnds[i]!;
    const inputs = verdictStringStart(v, F_INPUTS);
    bytes.set(vEnd === v.length ? v : v.subarray(0, vEnd), at);
    let end = vEnd;
    if (inputs >= 0) {
      end = writeInputs(v, bytes, at + inputs) - at;
      const endAt = at + VERDICT_LAYOUT.ends + F_INPUTS * 2;
      const offset = end - VERDICT_LAYOUT.strings;
      if (offset > 0xffff) throw new Error('history export row: strings and inputs over 64 KiB');
      bytes[endAt] = offset & 0xff;
      bytes[endAt + 1] = offset >> 8;
    }
    verdictAt[i] = at;
    at += align8(end);
    if (label) {
      const oEnd = oEnds[i]!;
      bytes.set(oEnd === label.length ? label : label.subarray(0, oEnd), at);
      outcomeAt[i] = at;
      at += align8(oEnd);
    } else outcomeAt[i] = label === false ? COMMITMENT_ROW : NO_OUTCOME_ROW;
  }
  return { bytes, verdictAt, outcomeAt, positions, cursorData, cursorOffsets };
}
