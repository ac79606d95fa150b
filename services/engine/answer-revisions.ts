/**
 * Answers the engine keeps for a candle (a regime reading, a risk forecast) and hands out as the
 * same object until the next close, each named by a revision of its own: what is made from such
 * an answer (its JSON, field by field: services/api/mcp/answer-json.ts) is then made once per
 * candle, not once per call. A recorded verdict needs none: its id and hash name it.
 *
 * The objects are never changed once handed out; a channel adds what is its own (`_service`) to
 * a copy.
 */
const revisions = new WeakMap<object, string>();
let next = 0;

/** Names `value` by a revision no other object has; returns `value`. */
export function keptAnswer<T extends object>(value: T): T {
  revisions.set(value, `kept-${++next}`);
  return value;
}

/** The revision of an answer the engine keeps, or undefined for any other object. */
export function keptRevision(value: object): string | undefined {
  return revisions.get(value);
}

/**
 * Names `value` by `revision`, a name its maker gives each answer of one run (the track record of
 * one window and ask, services/history/record-cache.ts, one after another as outcomes resolve),
 * where keptAnswer names each object apart: what is made from a name (answer-json.ts) then holds
 * the latest answer of the run alone, each field replaced as the next answer is served, rather than
 * a large answer per object kept up to the least-recently-used bound. Reuse goes by the very same
 * value, never by the name alone, so answers sharing a name never mix. Returns `value`.
 */
export function keptAnswerAs<T extends object>(value: T, revision: string): T {
  revisions.set(value, revision);
  return value;
}
