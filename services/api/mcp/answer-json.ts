/**
 * The JSON of a served tool result's structuredContent, made once per call and reused in both
 * places the MCP answer carries it: as structuredContent, and escaped as the string of its text
 * content. Profiled under load, serialising the ~2.7 KB trade call twice (the object, then that
 * JSON as a string) was the largest cost of our own on the keyed MCP path.
 *
 * A result that comes from a recorded verdict (it names its `verdictId` and `signalHash`) is
 * mostly the same from call to call: the engine serves one verdict revision from memory until the
 * next candle closes, and only the track-record line and `_service` change between callers. Its
 * fields' JSON is remembered per revision, field by field, and a field is reused only while the
 * call carries the very same value (the same object, or an equal primitive) under the same name;
 * anything else is serialised afresh. Fields are written in the object's own order each time, so
 * a call without the reasoning, say, gets its own shape from the same entry. A new revision is a new entry, so an answer
 * is never built from another verdict's fields. Objects a verdict hands out are never changed
 * after it is recorded (the engine builds them once per revision), which is what makes identity
 * enough within a revision.
 *
 * Escaping the concatenation of JSON pieces equals concatenating their escapes: JSON.stringify
 * escapes each character on its own (a surrogate pair as a pair, a lone one as \u escape) and
 * every cut between pieces falls on an ASCII delimiter, never inside a pair.
 */

export interface ResultJson {
  /** JSON.stringify of the object. */
  json: string;
  /**
   * JSON.stringify(json) without its enclosing quotes (the text content's string, escaped), when
   * it came at no extra cost; undefined when the caller must escape `json` itself if it needs it.
   */
  escaped: string | undefined;
  /** The same JSON with its remembered start already UTF-8, when it has one (see SplitJson). */
  split?: SplitJson;
}

/**
 * `json` (and its escape) as the UTF-8 of its start, kept per revision, and the rest as text. The
 * start is `{` and the leading fields this call reused, joined by commas; the rest is what the call
 * added (its `_service`), from the comma after the start to the closing brace. Profiled under load,
 * encoding the whole answer as UTF-8 on every call was the largest single cost of the keyed MCP
 * path: a trade call's text holds a few characters outside Latin-1 (−, ±, –), which makes V8 keep
 * it as a two-byte string, and such a string is encoded character by character.
 */
export interface SplitJson {
  head: Buffer;
  escapedHead: Buffer;
  tail: string;
  escapedTail: string;
}

interface Slot {
  value: unknown;
  /** `"key":<value JSON>`, and the same escaped. */
  piece: string;
  escapedPiece: string;
}

/** What one revision remembers: its fields' JSON by name, and the UTF-8 of the start last served. */
interface Revision {
  slots: Map<string, Slot>;
  head: Head | null;
  /** The value last served whole with a field added after it (serialiseWith), and its JSON as a start. */
  whole: { value: object; head: Head } | null;
}

/** The leading fields last served from a revision, as text and as UTF-8, and the same escaped. */
interface Head {
  slots: Slot[];
  json: string;
  escaped: string;
  jsonBytes: Buffer;
  escapedBytes: Buffer;
}

/** The UTF-8 of `parts` one after another, in one buffer. */
export function joinBytes(parts: readonly (Buffer | string)[]): Buffer {
  let length = 0;
  for (const part of parts) length += typeof part === 'string' ? Buffer.byteLength(part) : part.length;
  const out = Buffer.allocUnsafe(length);
  let at = 0;
  for (const part of parts) at += typeof part === 'string' ? out.write(part, at) : part.copy(out, at);
  return out;
}

/** Revisions remembered; the least recently used one goes first. */
const MAX_REVISIONS = 512;

/**
 * The slots of `object`'s own fields, in order, pushed onto `used`: a revision's slot where it
 * holds the same value, one made now (and remembered) where not, none for a field JSON leaves
 * out. Answers how many leading fields were reused rather than made by this call.
 */
function collectSlots(slots: Map<string, Slot>, object: Record<string, unknown>, used: Slot[]): number {
  let reused = 0;
  for (const key in object) {
    if (!Object.hasOwn(object, key)) continue;
    const value = object[key];
    let slot = slots.get(key);
    if (slot === undefined || slot.value !== value) {
      const made = slotOf(key, value);
      if (made === null) {
        slots.delete(key);
        continue;
      }
      slot = made;
      slots.set(key, slot);
    } else if (reused === used.length) {
      reused++;
    }
    used.push(slot);
  }
  return reused;
}

/** The escape of a JSON text, as it appears inside a JSON string. */
export function escapeJson(json: string): string {
  const quoted = JSON.stringify(json);
  return quoted.slice(1, quoted.length - 1);
}

function slotOf(key: string, value: unknown): Slot | null {
  const json = JSON.stringify(value) as string | undefined;
  // undefined, a function or a symbol: JSON.stringify leaves the property out.
  if (json === undefined) return null;
  const piece = `${JSON.stringify(key)}:${json}`;
  return { value, piece, escapedPiece: escapeJson(piece) };
}

export class AnswerJsonCache {
  private readonly revisions = new Map<string, Revision>();
  /** The revision served last: served again, it is already where the least-recently-used order wants it. */
  private latest: Revision | null = null;

  constructor(private readonly maxRevisions = MAX_REVISIONS) {}

  get size(): number {
    return this.revisions.size;
  }

  /**
   * The JSON of `structured` (a plain object of data properties, as the tool channel builds it)
   * and its escape. `revision` names the immutable thing most of its fields come from, or is null
   * when there is none: then nothing is remembered.
   */
  serialise(structured: Record<string, unknown>, revision: string | null): ResultJson {
    if (revision === null || Object.hasOwn(structured, 'toJSON')) {
      return { json: JSON.stringify(structured), escaped: undefined };
    }
    const entry = this.entryOf(revision);
    const used: Slot[] = [];
    const reused = collectSlots(entry.slots, structured, used);
    const head = reused === 0 ? null : headOf(entry, used, reused);
    return joined(head, used, reused);
  }

  /**
   * The JSON of `{...value, [key]: extra}` and its escape, without that object being made: a
   * channel adds its own field (`_service`) after the served value's. The value's fields, as a
   * remembered start, are reused whole while the revision serves the very same object (the
   * engine never changes one once handed out), so a repeated call neither copies the value nor
   * looks at its fields one by one; only `extra` is serialised. Anything else (no revision, a
   * value that has `key` or `toJSON`, or no field of its own) is serialised as `serialise` does.
   */
  serialiseWith(
    value: Record<string, unknown>,
    key: string,
    extra: unknown,
    revision: string | null,
  ): ResultJson {
    const head = revision === null ? null : this.wholeHead(value, key, revision);
    if (head === null) return this.serialise({ ...value, [key]: extra }, revision);
    const tail = lastField(key, extra);
    const escapedTail = escapeJson(tail);
    return {
      json: head.json + tail,
      escaped: head.escaped + escapedTail,
      split: { head: head.jsonBytes, escapedHead: head.escapedBytes, tail, escapedTail },
    };
  }

  /** The UTF-8 of `{...value, [key]: extra}` (see serialiseWith), when its escape is not needed. */
  bytesWith(value: Record<string, unknown>, key: string, extra: unknown, revision: string | null): Buffer {
    const head = revision === null ? null : this.wholeHead(value, key, revision);
    if (head === null) {
      const made = this.serialise({ ...value, [key]: extra }, revision);
      return made.split ? joinBytes([made.split.head, made.split.tail]) : Buffer.from(made.json);
    }
    return joinBytes([head.jsonBytes, lastField(key, extra)]);
  }

  /** Every field of `value` as a start (see serialiseWith); null when the value cannot be one. */
  private wholeHead(value: Record<string, unknown>, key: string, revision: string): Head | null {
    const entry = this.entryOf(revision);
    const whole = entry.whole;
    if (whole !== null && whole.value === value) return whole.head;
    if (Object.hasOwn(value, key) || Object.hasOwn(value, 'toJSON')) return null;
    const used: Slot[] = [];
    collectSlots(entry.slots, value, used);
    if (used.length === 0) return null;
    const head = headOf(entry, used, used.length);
    entry.whole = { value, head };
    return head;
  }

  /** The revision's entry, made when new, and moved to the most recently used end. */
  private entryOf(revision: string): Revision {
    let entry = this.revisions.get(revision);
    if (entry === undefined) {
      entry = { slots: new Map(), head: null, whole: null };
      if (this.revisions.size >= this.maxRevisions) {
        this.revisions.delete(this.revisions.keys().next().value!);
      }
      this.revisions.set(revision, entry);
    } else if (entry !== this.latest) {
      // Re-inserted at the end: the Map's order stays least recently used first.
      this.revisions.delete(revision);
      this.revisions.set(revision, entry);
    }
    this.latest = entry;
    return entry;
  }
}

/** `,"key":<extra>}`, the end of an object after a start of other fields; just `}` for a left-out value. */
function lastField(key: string, extra: unknown): string {
  const extraJson = JSON.stringify(extra) as string | undefined;
  // undefined, a function or a symbol: JSON.stringify leaves the property out.
  return extraJson === undefined ? '}' : `,${JSON.stringify(key)}:${extraJson}}`;
}

/** The JSON of fields `used`, the first `reused` of them as `head` (null: none), and its escape. */
function joined(head: Head | null, used: Slot[], reused: number): ResultJson {
  // The call's own fields after the start, each after a comma (the start ends with a field).
  let tail = '';
  let escapedTail = '';
  for (let i = reused; i < used.length; i++) {
    const slot = used[i]!;
    tail += i === 0 ? slot.piece : `,${slot.piece}`;
    escapedTail += i === 0 ? slot.escapedPiece : `,${slot.escapedPiece}`;
  }
  tail += '}';
  escapedTail += '}';
  if (head === null) return { json: `{${tail}`, escaped: `{${escapedTail}` };
  return {
    json: head.json + tail,
    escaped: head.escaped + escapedTail,
    split: { head: head.jsonBytes, escapedHead: head.escapedBytes, tail, escapedTail },
  };
}

/** The start of an answer whose first `reused` fields are `used`'s: the one remembered, or made now. */
function headOf(entry: Revision, used: Slot[], reused: number): Head {
  const head = entry.head;
  if (head !== null && head.slots.length === reused) {
    let same = true;
    for (let i = 0; i < reused && same; i++) same = head.slots[i] === used[i];
    if (same) return head;
  }
  const slots = used.slice(0, reused);
  const json = `{${slots.map((s) => s.piece).join(',')}`;
  const escaped = `{${slots.map((s) => s.escapedPiece).join(',')}`;
  const made = { slots, json, escaped, jsonBytes: Buffer.from(json), escapedBytes: Buffer.from(escaped) };
  entry.head = made;
  return made;
}
