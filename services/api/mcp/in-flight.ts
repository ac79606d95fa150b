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

// 7 and "7" are different JSON-RPC ids.
const keyOf = (id: RpcId) => `${typeof id}:${id}`;

/**
 * The ids one request holds until it is answered. A class rather than a closure per request:
 * under tsx every named closure is renamed with a property definition as it is made, which
 * showed in the keyed MCP profile.
 */
export class HeldIds {
  private released = false;

  constructor(
    private readonly owner: InFlightIds,
    private readonly sessionId: string,
    private readonly held: Set<string>,
    private readonly keys: string[],
  ) {}

  release(): void {
    if (this.released) return;
    this.released = true;
    for (const key of this.keys) this.held.delete(key);
    this.owner.emptied(this.sessionId, this.held);
  }
}

export class InFlightIds {
  private readonly bySession = new Map<string, Set<string>>();

  /**
   * Claims every id for the session, or none: the id that is already in flight (or repeated
   * within the body) when there is one, else the claim, to release once answered.
   */
  claim(sessionId: string, ids: RpcId[]): { conflict: RpcId } | HeldIds {
    const held = this.bySession.get(sessionId) ?? new Set<string>();
    const keys: string[] = [];
    for (const id of ids) {
      const key = keyOf(id);
      if (held.has(key) || keys.includes(key)) return { conflict: id };
      keys.push(key);
    }
    for (const key of keys) held.add(key);
    if (keys.length > 0) this.bySession.set(sessionId, held);
    return new HeldIds(this, sessionId, held, keys);
  }

  /** Drops a session's set once its last id is released (unless the session was forgotten meanwhile). */
  emptied(sessionId: string, held: Set<string>): void {
    if (held.size === 0 && this.bySession.get(sessionId) === held) this.bySession.delete(sessionId);
  }

  forget(sessionId: string): void {
    this.bySession.delete(sessionId);
  }
}
