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
}

interface Slot {
  value: unknown;
  /** `"key":<value JSON>`, and the same escaped. */
  piece: string;
  escapedPiece: string;
}

/** Revisions remembered; the least recently used one goes first. */
const MAX_REVISIONS = 512;

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
  private readonly revisions = new Map<string, Map<string, Slot>>();

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
    let slots = this.revisions.get(revision);
    if (slots === undefined) {
      slots = new Map();
      if (this.revisions.size >= this.maxRevisions) {
        this.revisions.delete(this.revisions.keys().next().value!);
      }
    } else {
      this.revisions.delete(revision);
    }
    // Re-inserted at the end: the Map's order stays least recently used first.
    this.revisions.set(revision, slots);
    let json = '{';
    let escaped = '{';
    let first = true;
    for (const key in structured) {
      if (!Object.hasOwn(structured, key)) continue;
      const value = structured[key];
      let slot = slots.get(key);
      if (slot === undefined || slot.value !== value) {
        const made = slotOf(key, value);
        if (made === null) {
          slots.delete(key);
          continue;
        }
        slot = made;
        slots.set(key, slot);
      }
      if (!first) {
        json += ',';
        escaped += ',';
      }
      first = false;
      json += slot.piece;
      escaped += slot.escapedPiece;
    }
    return { json: `${json}}`, escaped: `${escaped}}` };
  }
}
