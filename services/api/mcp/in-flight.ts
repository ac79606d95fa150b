/**
 * JSON-RPC ids in flight per MCP session. The SDK transport keys its pending responses by
 * request id, so a second request reusing an id that is still being answered replaces the
 * first one's entry and one of the two HTTP requests is never answered: its connection stays
 * open for good. A repeated id is therefore refused before it reaches the transport.
 */

type RpcId = string | number;

/** The ids of the requests in a POST body (notifications and responses carry none that count). */
export function requestIds(body: unknown): RpcId[] {
  const messages = Array.isArray(body) ? body : [body];
  const ids: RpcId[] = [];
  for (const m of messages) {
    if (m === null || typeof m !== 'object') continue;
    const { id, method } = m as { id?: unknown; method?: unknown };
    if (typeof method !== 'string') continue;
    if (typeof id === 'string' || typeof id === 'number') ids.push(id);
  }
  return ids;
}

/**
 * A session's ids in flight, strings and numbers apart (7 and "7" are different JSON-RPC ids):
 * looked up as they are, where a key spelt per request (`number:7`) was a new string to hash.
 */
interface Held {
  strings: Set<RpcId>;
  numbers: Set<RpcId>;
}

/** The set that holds ids of `id`'s type. */
const setOf = (held: Held, id: RpcId): Set<RpcId> => (typeof id === 'string' ? held.strings : held.numbers);

/**
 * The ids one request holds until it is answered. A class rather than a closure per request:
 * under tsx every named closure is renamed with a property definition as it is made, which
 * showed in the keyed MCP profile.
 */
export class HeldIds {
  private released = false;

  constructor(
    private readonly held: Held | null,
    private readonly ids: RpcId[],
  ) {}

  release(): void {
    if (this.released || this.held === null) return;
    this.released = true;
    for (const id of this.ids) setOf(this.held, id).delete(id);
  }
}

export class InFlightIds {
  /**
   * Kept for as long as the session (dropped by `forget`, which its close calls), not made and
   * dropped around each request: that was a Set and two Map writes per keyed call.
   */
  private readonly bySession = new Map<string, Held>();

  /**
   * Claims every id for the session, or none: the id that is already in flight (or repeated
   * within the body) when there is one, else the claim, to release once answered.
   */
  claim(sessionId: string, ids: RpcId[]): { conflict: RpcId } | HeldIds {
    if (ids.length === 0) return new HeldIds(null, ids);
    let held = this.bySession.get(sessionId);
    if (held === undefined) {
      held = { strings: new Set(), numbers: new Set() };
      this.bySession.set(sessionId, held);
    }
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      // indexOf compares strictly: 7 and "7" are not a repeat.
      if (setOf(held, id).has(id) || ids.indexOf(id) !== i) return { conflict: id };
    }
    for (const id of ids) setOf(held, id).add(id);
    return new HeldIds(held, ids);
  }

  forget(sessionId: string): void {
    this.bySession.delete(sessionId);
  }
}
