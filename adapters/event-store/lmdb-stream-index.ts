import type { Database, RootDatabase } from 'lmdb';

/**
 * The stream index of the LMDB store: each stream's events by revision, as positions. Two forms,
 * one per log (IdIndex.streamLists tells which):
 *
 * - text keys (`streams`, the logs written before the lists): one entry per event keyed
 *   [stream, revision]. Every event repeats its stream's name (70 bytes for a quota stream) and,
 *   since the events of many streams interleave, each new entry lands inside a leaf, which LMDB
 *   splits in half: 171 bytes of tree a quota debit, 67 a verdict, 118 an outcome.
 * - lists (`streamLists`, LMDB duplicates): one key per stream, its name once, and under it a
 *   sorted list of its entries, each a revision and its position (ListIndex). A stream's list
 *   is a tree of its own that only grows at its end: 14 bytes a debit, 55 a verdict, 123 an
 *   outcome (a stream of one event: its key and one value).
 */
export interface StreamIndex {
  put(stream: string, revision: number, position: number): void;
  /** The stream's last revision, null without events; `hint`: the last one this process saw (-1: none). */
  lastRevision(stream: string, hint: number): number | null;
  /** Positions of the stream's events from `fromRevision` on, at most `maxCount` (Infinity: all). */
  positions(stream: string, fromRevision: number, maxCount: number): Iterable<number>;
}

type StreamKey = [stream: string, revision: number];
const LAST_REVISION = Number.MAX_SAFE_INTEGER;

class TextKeyIndex implements StreamIndex {
  constructor(private readonly db: Database<number, StreamKey>) {}

  put(stream: string, revision: number, position: number): void {
    this.db.putSync([stream, revision], position);
  }

  lastRevision(stream: string, hint: number): number | null {
    // Two point reads confirm the hint (the hinted key is there, the next one is not); -1: no
    // stream, which the absence of revision 0 confirms (a new delivery stream, mostly).
    if ((hint < 0 || this.db.doesExist([stream, hint])) && !this.db.doesExist([stream, hint + 1])) {
      return hint < 0 ? null : hint;
    }
    for (const [, last] of this.db.getKeys({
      start: [stream, LAST_REVISION],
      end: [stream],
      reverse: true,
      limit: 1,
    })) {
      return last;
    }
    return null;
  }

  *positions(stream: string, fromRevision: number, maxCount: number): Iterable<number> {
    for (const { value } of this.db.getRange({
      start: [stream, fromRevision],
      end: [stream, LAST_REVISION],
      ...(Number.isFinite(maxCount) ? { limit: maxCount } : {}),
    })) {
      yield value;
    }
  }
}

/**
 * Digits of a list entry, in ascending ASCII order, so entries compare as their numbers do. An
 * entry is a string: the revision's digit count as one digit, its digits (base 64, most
 * significant first), then the position's digits. The count first makes a longer revision sort
 * after a shorter one and the revision a prefix no other revision's entry starts with: entries
 * sort by revision, and a revision alone (`start`) sorts before its entry. Not [revision,
 * position] as ordered-binary arrays: larger (19 bytes an entry).
 */
const DIGITS = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
const DIGIT_VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < DIGITS.length; i++) DIGIT_VALUE[DIGITS.charCodeAt(i)] = i;

function digits(n: number): string {
  let out = '';
  do {
    out = DIGITS[n % 64]! + out;
    n = Math.floor(n / 64);
  } while (n > 0);
  return out;
}

function revisionPrefix(revision: number): string {
  const d = digits(revision);
  return DIGITS[d.length]! + d;
}

function number(s: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) n = n * 64 + DIGIT_VALUE[s.charCodeAt(i)]!;
  return n;
}

/** The [revision, position] of a list entry. */
export function listEntry(entry: string): [revision: number, position: number] {
  const end = 1 + DIGIT_VALUE[entry.charCodeAt(0)]!;
  return [number(entry, 1, end), number(entry, end, entry.length)];
}

/**
 * A stream's key: its name's UTF-8 bytes, read back (were it ever) as bytes. Inside a write
 * transaction lmdb-js decodes the key buffer at each step of a `getValues`, though that call never
 * writes it: with ordered-binary keys it decoded what an earlier operation left there (an events
 * position, say) and threw (RangeError from ordered-binary, "cannot be converted to a BigInt").
 * Bytes decode as anything.
 */
const keyOf = (stream: string): Buffer => Buffer.from(stream, 'utf8');

class ListIndex implements StreamIndex {
  constructor(private readonly db: Database<string, Buffer>) {}

  put(stream: string, revision: number, position: number): void {
    this.db.putSync(keyOf(stream), revisionPrefix(revision) + digits(position));
  }

  lastRevision(stream: string): number | null {
    // The list's last entry: one cursor read, with or without a hint.
    for (const entry of this.db.getValues(keyOf(stream), { reverse: true, limit: 1 }))
      return listEntry(entry)[0];
    return null;
  }

  *positions(stream: string, fromRevision: number, maxCount: number): Iterable<number> {
    for (const entry of this.db.getValues(keyOf(stream), {
      start: revisionPrefix(fromRevision),
      ...(Number.isFinite(maxCount) ? { limit: maxCount } : {}),
    })) {
      yield listEntry(entry)[1];
    }
  }
}

export function openStreamIndex(root: RootDatabase, lists: boolean): StreamIndex {
  return lists
    ? new ListIndex(
        root.openDB<string, Buffer>({
          name: 'streamLists',
          dupSort: true,
          encoding: 'ordered-binary',
          keyEncoding: 'binary',
        }),
      )
    : new TextKeyIndex(root.openDB<number, StreamKey>({ name: 'streams' }));
}
