import type { Database, Key, RootDatabase } from 'lmdb';
import { addExtension } from 'msgpackr';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { isTimeOrderedId } from '../../contracts/event-id.ts';
import { NewerLogError } from './port.ts';

/**
 * The compact body of an LMDB event (format 2). Most of a stored event is identifiers written as
 * text: the event id and its correlation id (UUIDs, usually equal), verdict hashes (64 hex
 * digits), stream names ending in a hash or UUID, ISO timestamps, the type name. Written as the
 * bytes they spell (a type as a one-byte code; the correlation id, when it is the event's id, and
 * the position, which is the entry's key, not at all), they take about half the room; every other
 * value stays as msgpack writes it, floats at full precision, since a verdict's hash covers its
 * inputs exactly. With the id index keyed by UUID bytes (IdIndex), an event of the deployed mix
 * takes about a quarter less of the disk than in format 1.
 *
 * Each such string is wrapped at write time in one of the classes below, which msgpackr writes as
 * an extension; reading the extension gives the same string back, so a read needs no second pass
 * over the data. A string is wrapped only when its decoded form is exactly the original (lowercase
 * hex, canonical UUID, a timestamp that prints back the same), so the log reads back unchanged.
 * Events written before (format 1: every string as text) have no extensions and read as they were;
 * a process running older code cannot read format 2.
 */

/** msgpack extension types (application range; msgpackr's own are 0, 0x42, 0x62, 0x65, 0x69, 0x70, 0x73, 0x74, 0x78). */
const EXT_UUID = 0x55;
const EXT_HEX = 0x48;
const EXT_TIME = 0x54;
const EXT_TYPE = 0x59;

/** A canonical lowercase UUID, stored as its 16 bytes. */
class UuidText {
  constructor(readonly bytes: Buffer) {}
}
/**
 * A string ending in 32 or more lowercase hex digits (or a UUID), after an optional short prefix:
 * `quota-<hash>`, `verdict-outcome-<uuid>`, `0x<hex>`, a bare hash. Stored as one header byte
 * (prefix length, high bit set when the tail is a UUID), the prefix, and the tail's bytes.
 */
class HexTailText {
  constructor(readonly bytes: Buffer) {}
}
/** An ISO timestamp with milliseconds, as `Date#toISOString` prints it, stored as 6 bytes of Unix ms. */
class TimeText {
  constructor(readonly bytes: Buffer) {}
}
/** An event type name of TYPE_CODES, stored as its one-byte code. */
class TypeCode {
  constructor(readonly bytes: Buffer) {}
}

/**
 * Codes of the event type names, so the name of an event takes 3 bytes instead of up to 26, and
 * a log holding a type this build does not know says so by its code (NewerLogError). Stored codes
 * refer to this list: append only, never reorder or reuse a code. Every type of the event catalog
 * has one (lmdb-codec.unit.test: a type added to the catalog without a code fails there), so a
 * newer version's new type is always written under a code above those an older one knows. A name
 * not in it (no domain event: every version's parser skips it alike) is stored as text, as
 * DeliveryQueued, HistoryAnchored and the first PaymentAnswerServed and PaymentIdentifierClaimed
 * were before they got theirs: such events read back by name.
 */
export const TYPE_NAMES = [
  'VerdictRecorded',
  'VerdictOutcomeResolved',
  'RegimeShifted',
  'QuotaDebited',
  'QuotaDebitsRecorded',
  'ChatQuotaConsumed',
  'ChatQuotaRefunded',
  'DeliveryAttempted',
  'DeliverySequenced',
  'DeliverySucceeded',
  'DeliveryFailed',
  'PaymentAuthorized',
  'PaymentSettlementPending',
  'PaymentSettled',
  'PaymentSettlementFailed',
  'PaymentReleased',
  'ApiKeyIssued',
  'ApiKeyPlanChanged',
  'ApiKeyRevoked',
  'SubscriptionCreated',
  'SubscriptionDeleted',
  'SubscriptionDisabled',
  'SubscriptionReEnabled',
  'SubscriptionSecretRotated',
  'ReplayClockAnchored',
  'QuotaDebitsReturned',
  'RiskShifted',
  'DeliveryQueued',
  'HistoryAnchored',
  'PaymentAnswerServed',
  'PaymentIdentifierClaimed',
  'SubscriptionSecretResealed',
  'SubscriptionUpdated',
] as const;
const TYPE_CODES = new Map<string, TypeCode>(
  TYPE_NAMES.map((name, i) => [name, new TypeCode(Buffer.from([i + 1]))]),
);

addExtension({ Class: UuidText, type: EXT_UUID, pack: (v: UuidText) => v.bytes, unpack: uuidOf });
addExtension({ Class: HexTailText, type: EXT_HEX, pack: (v: HexTailText) => v.bytes, unpack: hexTailOf });
addExtension({ Class: TimeText, type: EXT_TIME, pack: (v: TimeText) => v.bytes, unpack: timeOf });
/** The highest type code this build knows. */
export const KNOWN_TYPE_CODES = TYPE_NAMES.length;

/** The refusal of a log holding event type code `code`, above those this build knows. */
export function newerCodeError(code: number, where?: string): NewerLogError {
  return new NewerLogError(`event type code ${code}`, `1-${KNOWN_TYPE_CODES}`, where);
}

addExtension({
  Class: TypeCode,
  type: EXT_TYPE,
  pack: (v: TypeCode) => v.bytes,
  unpack: (bytes: Uint8Array) => {
    const name = TYPE_NAMES[bytes[0]! - 1];
    if (name === undefined) throw newerCodeError(bytes[0]!);
    return name;
  },
});

/**
 * The type code of an event's stored form (`encodeStoredEvent`); 0 for a type stored as text (a
 * name outside the catalog, which no version's domain parser reads, so none needs refusing).
 */
export function typeCodeOf(stored: Record<string, unknown>): number {
  return stored.type instanceof TypeCode ? stored.type.bytes[0]! : 0;
}

/**
 * The stored form of type code `code`, known to this build or not: what a newer build writes for a
 * type this one does not know (for tests of the refusal).
 */
export function storedTypeCode(code: number): unknown {
  return new TypeCode(Buffer.from([code]));
}

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
/** Shorter hex runs (ids like `sub_12`, a 6-digit colour) gain little and are left as text. */
const MIN_HEX_TAIL = 32;
const MAX_PREFIX = 127;
const MAX_TIME = 2 ** 48;

/** Value of each lowercase hex digit's char code; -1 for anything else. */
const HEX_VALUE = new Int8Array(128).fill(-1);
for (let c = 0; c < 16; c++) HEX_VALUE['0123456789abcdef'.charCodeAt(c)] = c;

/**
 * The 16 bytes of `s[at..at+36]` when it is a canonical lowercase UUID, else null: the check and
 * the parse in one pass (a regex test, a dash-free copy and a hex decode cost three times as
 * much, and an append does this for every event, its id index key included).
 */
function parseUuid(s: string, at = 0): Buffer | null {
  if (s.length - at < 36) return null;
  // Most strings that reach here (hashes, names) fail on a dash: checked before allocating.
  if (
    s.charCodeAt(at + 8) !== 45 ||
    s.charCodeAt(at + 13) !== 45 ||
    s.charCodeAt(at + 18) !== 45 ||
    s.charCodeAt(at + 23) !== 45
  )
    return null;
  const out = Buffer.allocUnsafe(16);
  let o = 0;
  for (let i = at; i < at + 36; ) {
    const k = i - at;
    if (k === 8 || k === 13 || k === 18 || k === 23) {
      i++;
      continue;
    }
    const hi = s.charCodeAt(i);
    const lo = s.charCodeAt(i + 1);
    const h = hi < 128 ? HEX_VALUE[hi]! : -1;
    const l = lo < 128 ? HEX_VALUE[lo]! : -1;
    if (h < 0 || l < 0) return null;
    out[o++] = (h << 4) | l;
    i += 2;
  }
  return out;
}

/**
 * Decoding writes the characters into one scratch buffer and reads them out as a single flat
 * string: a rebuild decodes millions of these, and strings built by concatenation (ropes) cost
 * their readers a flattening each (regex checks, map keys).
 */
let scratch = Buffer.allocUnsafe(256);
const HEX_PAIRS = Array.from({ length: 256 }, (_, i) => [
  i.toString(16).padStart(2, '0').charCodeAt(0),
  i.toString(16).padStart(2, '0').charCodeAt(1),
]).flat();

/** Writes the hex digits of `bytes[from..]` at `at` in `out`; returns where they end. */
function writeHex(out: Buffer, at: number, bytes: Uint8Array, from: number, to: number): number {
  let o = at;
  for (let i = from; i < to; i++) {
    const b = bytes[i]! << 1;
    out[o++] = HEX_PAIRS[b]!;
    out[o++] = HEX_PAIRS[b + 1]!;
  }
  return o;
}

/** Writes a UUID's 36 characters for its 16 bytes at `bytes[from..]`; returns where they end. */
function writeUuid(out: Buffer, at: number, bytes: Uint8Array, from: number): number {
  let o = writeHex(out, at, bytes, from, from + 4);
  out[o++] = 45; // -
  o = writeHex(out, o, bytes, from + 4, from + 6);
  out[o++] = 45;
  o = writeHex(out, o, bytes, from + 6, from + 8);
  out[o++] = 45;
  o = writeHex(out, o, bytes, from + 8, from + 10);
  out[o++] = 45;
  return writeHex(out, o, bytes, from + 10, from + 16);
}

function room(length: number): Buffer {
  if (scratch.length < length) scratch = Buffer.allocUnsafe(Math.max(length, scratch.length * 2));
  return scratch;
}

/** `Buffer#latin1Slice` where Node has it (what `toString('latin1')` calls after its argument checks). */
const latin1 = (Buffer.prototype as unknown as { latin1Slice?: (start: number, end: number) => string })
  .latin1Slice;
function text(out: Buffer, end: number): string {
  return latin1 ? latin1.call(out, 0, end) : out.toString('latin1', 0, end);
}

function uuidOf(bytes: Uint8Array): string {
  const out = room(36);
  return text(out, writeUuid(out, 0, bytes, 0));
}

function hexTailOf(bytes: Uint8Array): string {
  const header = bytes[0]!;
  const prefixLength = header & 0x7f;
  const from = 1 + prefixLength;
  const out = room(prefixLength + (bytes.length - from) * 2 + 4);
  for (let i = 0; i < prefixLength; i++) out[i] = bytes[1 + i]!;
  const end =
    (header & 0x80) !== 0
      ? writeUuid(out, prefixLength, bytes, from)
      : writeHex(out, prefixLength, bytes, from, bytes.length);
  return text(out, end);
}

/** The events of one commit share their timestamp: the last one decoded is kept. */
let lastTime = -1;
let lastIso = '';
function timeOf(bytes: Uint8Array): string {
  const ms = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).readUIntBE(0, 6);
  if (ms !== lastTime) {
    lastIso = new Date(ms).toISOString();
    lastTime = ms;
  }
  return lastIso;
}

function isHexDigit(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 97 && c <= 102);
}

type Compact = string | UuidText | HexTailText | TimeText;

/**
 * `compactString` remembering its last string and form: the events of an append share their
 * stream, and those of a commit their time. The wrappers are never changed once made.
 */
function lastCompacted(): (s: string) => Compact {
  let last: string | null = null;
  let form: Compact = '';
  return (s) => {
    if (s !== last) {
      form = compactString(s);
      last = s;
    }
    return form;
  };
}
const compactStream = lastCompacted();
const compactRecordedAt = lastCompacted();

/** The stored form of a string: a wrapper when a compact form reads back identical, else the string. */
function compactString(s: string): Compact {
  const n = s.length;
  if (n === 24 && s.charCodeAt(23) === 90 /* Z */ && ISO_MS.test(s)) {
    const ms = Date.parse(s);
    if (ms >= 0 && ms < MAX_TIME && new Date(ms).toISOString() === s) {
      const bytes = Buffer.allocUnsafe(6);
      bytes.writeUIntBE(ms, 0, 6);
      return new TimeText(bytes);
    }
    return s;
  }
  if (n < MIN_HEX_TAIL) return s;
  if (n === 36) {
    const uuid = parseUuid(s);
    if (uuid) return new UuidText(uuid);
  }
  // A UUID tail after a prefix.
  const tailUuid = n > 36 && n - 36 <= MAX_PREFIX ? parseUuid(s, n - 36) : null;
  if (tailUuid) {
    const prefix = s.slice(0, n - 36);
    if (isLatin1Ascii(prefix)) {
      const bytes = Buffer.allocUnsafe(1 + prefix.length + 16);
      bytes[0] = 0x80 | prefix.length;
      bytes.write(prefix, 1, 'latin1');
      tailUuid.copy(bytes, 1 + prefix.length);
      return new HexTailText(bytes);
    }
    return s;
  }
  // The longest run of hex digits at the end, of even length.
  let start = n;
  while (start > 0 && isHexDigit(s.charCodeAt(start - 1))) start--;
  if ((n - start) % 2 === 1) start++;
  if (n - start < MIN_HEX_TAIL || start > MAX_PREFIX) return s;
  const prefix = s.slice(0, start);
  if (!isLatin1Ascii(prefix)) return s;
  const tail = Buffer.from(s.slice(start), 'hex');
  const bytes = Buffer.allocUnsafe(1 + start + tail.length);
  bytes[0] = start;
  bytes.write(prefix, 1, 'latin1');
  tail.copy(bytes, 1 + start);
  return new HexTailText(bytes);
}

/** Printable ASCII only, so one byte per character and `latin1` round-trips it. */
function isLatin1Ascii(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 32 || c > 126) return false;
  }
  return true;
}

/** A copy of `value` with every string in compact form; `value` itself is never changed. */
function compactValue(value: unknown): unknown {
  if (typeof value === 'string') return compactString(value);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const v = value[i];
      const c = compactValue(v);
      if (c !== v) {
        out ??= value.slice();
        out[i] = c;
      }
    }
    return out ?? value;
  }
  // Only plain records are walked: anything else (a Buffer, a Date) is written as before.
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  let out: Record<string, unknown> | null = null;
  const record = value as Record<string, unknown>;
  for (const k in record) {
    if (!Object.hasOwn(record, k)) continue;
    const v = record[k];
    const c = compactValue(v);
    if (c !== v) {
      out ??= { ...record };
      out[k] = c;
    }
  }
  return out ?? value;
}

/**
 * The value stored for `event`: the envelope's field order and names are kept (so msgpackr's
 * shared structures stay the same as format 1's), identifiers and the type in compact form; the
 * position (the entry's key) and the correlation id when it is the event's own id (the default)
 * as null, which format 1 never stores: a null reads back as the key and the id.
 */
export function encodeStoredEvent(
  event: RecordedEvent,
  id: StoredId = compactString(event.id),
): { id: StoredId } & Record<string, unknown> {
  return {
    id,
    type: TYPE_CODES.get(event.type) ?? event.type,
    stream: compactStream(event.stream),
    revision: event.revision,
    position: null,
    recordedAt: compactRecordedAt(event.recordedAt),
    correlationId: event.correlationId === event.id ? null : compactString(event.correlationId),
    causationId: event.causationId === null ? null : compactString(event.causationId),
    data: compactValue(event.data),
  };
}

/** An event id as an event's stored form holds it (`storedId`): its bytes for a UUID. */
export type StoredId = Compact;

/**
 * The stored form of an event id: what `encodeStoredEvent` writes and `IdIndex.getStored` and
 * `putStored` key it by, so an append parses a caller's id once for its look-up, its event and
 * its index entry.
 */
export function storedId(id: string): StoredId {
  return compactString(id);
}

/** The event a stored value (format 1 or 2) at `position` stands for. Mutates the freshly decoded value. */
export function decodeStoredEvent(value: RecordedEvent, position: number): RecordedEvent {
  if (value.position === null) value.position = position;
  if (value.correlationId === null) value.correlationId = value.id;
  return value;
}

/**
 * The id index (event id → position) of a format 2 store keys each canonical UUID by its 16
 * bytes instead of its 36 characters: about 30 bytes less per event, the index being a third of
 * what an event adds to the log. Any other id keeps its text key. A store keeps the key form it
 * was created with (an entry at FORMAT_KEY marks the new one), since a mixed index would need
 * two lookups per id; one created before keeps text keys for every id.
 */
export class IdIndex {
  constructor(
    private readonly db: Database<number, Key>,
    readonly binary: boolean,
  ) {}

  private key(id: string): Key {
    // An index of text keys parses only a time-ordered id (version digit 7): it takes its prefixed
    // key there too (indexKey).
    if (id.length !== 36 || !(this.binary || isTimeOrderedId(id))) return id;
    const bytes = parseUuid(id);
    return bytes === null ? id : indexKey(bytes);
  }

  get(id: string): number | undefined {
    return this.db.get(this.key(id));
  }

  doesExist(id: string): boolean {
    return this.db.doesExist(this.key(id));
  }

  putSync(id: string, position: number): void {
    this.db.putSync(this.key(id), position);
  }

  /** `get` for an id whose stored form (`storedId`) is at hand: the key is not parsed again. */
  getStored(id: string, stored: StoredId): number | undefined {
    return this.db.get(this.storedKey(id, stored));
  }

  /**
   * `putSync` for an id the event's stored form already holds as bytes (`encodeStoredEvent`'s
   * `id`): the key is not parsed from the text a second time.
   */
  putStored(id: string, stored: StoredId, position: number): void {
    this.db.putSync(this.storedKey(id, stored), position);
  }

  /**
   * The highest event type code the log holds, as its appends recorded it (TYPE_CODE_KEY); 0 when
   * none was recorded (a log of a version before the record, whose codes this build knows).
   */
  typeCode(): number {
    return this.db.get(TYPE_CODE_KEY) ?? 0;
  }

  /** Inside the append's write transaction: records `code` when it is above the recorded one. */
  recordTypeCode(code: number): void {
    if (code > this.typeCode()) this.db.putSync(TYPE_CODE_KEY, code);
  }

  /** The id's key from its stored bytes where they make it, else from its text (`key`). */
  private storedKey(id: string, stored: StoredId): Key {
    return stored instanceof UuidText && (this.binary || isOrdered(stored.bytes))
      ? indexKey(stored.bytes)
      : this.key(id);
  }
}

/**
 * Put before a time-ordered (version-7) id's bytes in its index key. Such ids all start with the
 * same few bytes (their millisecond), inside the range random ids spread over: keyed as they are,
 * each new one lands in a leaf with random ids after it, and LMDB splits such a leaf in half, so
 * their leaves stay half full (51.9 bytes of leaf per entry for 200k random ids then 200k ordered
 * ones, against 42.9 for random ids alone). Behind this prefix they sort after every random id (a
 * random id starts with it once in 2^32), each new one goes to the last leaf, which LMDB fills
 * before it starts the next: 38.6 bytes per entry for the same ids. A 20-byte key never equals a
 * 16-byte one, and text keys are UTF-8, which has no 0xff byte. An index of text keys (a store
 * created before UUIDs were keyed by their bytes) keys these ids so as well: no version before
 * this one made them, so none is stored under its text, and one lookup per id still finds it.
 */
const ORDERED_ID_PREFIX = Buffer.from([0xff, 0xff, 0xff, 0xff]);

/** Whether a UUID's bytes are of version 7 (the time-ordered kind, newEventId). */
function isOrdered(bytes: Buffer): boolean {
  return bytes[6]! >> 4 === 7;
}

function indexKey(bytes: Buffer): Buffer {
  return isOrdered(bytes) ? Buffer.concat([ORDERED_ID_PREFIX, bytes]) : bytes;
}

/** An id no event takes: its entry says the index keys UUIDs by their bytes. */
const FORMAT_KEY = '~format';
/**
 * An id no event takes either: the highest event type code written to the log. A version that
 * adds a type records its code in the append that first writes it, and an older one, finding a
 * code it does not know here, refuses the log when it opens it (NewerLogError), wherever in the
 * log that event lies.
 */
const TYPE_CODE_KEY = '~typeCode';
const BINARY_IDS = 2;

/** Opens the id index of `root`; `empty` tells whether the log holds no event yet. */
export function openIdIndex(root: RootDatabase, empty: () => boolean): IdIndex {
  const db = root.openDB<number, Key>({ name: 'ids' });
  let format = db.get(FORMAT_KEY);
  if (format === undefined && empty()) {
    db.putSync(FORMAT_KEY, BINARY_IDS);
    format = BINARY_IDS;
  }
  return new IdIndex(db, format === BINARY_IDS);
}
