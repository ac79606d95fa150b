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
 * A session's ids in flight, in an array compared strictly (7 and "7" are different JSON-RPC ids):
 * a session has a handful in flight at a time. A Set that every call added its id to and deleted
 * it from rebuilt its table every few calls (a microbenchmark of two claims and their releases:
 * 0.44-0.61 µs with Sets, 0.05-0.39 with an array), and showed in the keyed MCP profile.
 */
type Held = RpcId[];

/** Takes `id` out of `held` (order does not matter: the last id takes its place). */
export function releaseId(held: Held, id: RpcId): void {
  const at = held.indexOf(id);
  if (at < 0) return;
  const last = held.pop()!;
  if (at < held.length) held[at] = last;
}

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
    for (const id of this.ids) releaseId(this.held, id);
  }
}

/**
 * A session's ids in flight: all of them (`held`, what a repeated id is refused by) and, among
 * them, those of plain tools/calls (`plain`, claimed by claimOne), the only calls that ask whether
 * they were cancelled. The others are answered by the SDK transport, which takes the notification
 * itself.
 */
type SessionIds = { held: Held; plain: Held };

export class InFlightIds {
  /**
   * Kept for as long as the session (dropped by `forget`, which its close calls), not made and
   * dropped around each request.
   */
  private readonly bySession = new Map<string, SessionIds>();

  private idsOf(sessionId: string): SessionIds {
    let ids = this.bySession.get(sessionId);
    if (ids === undefined) {
      ids = { held: [], plain: [] };
      this.bySession.set(sessionId, ids);
    }
    return ids;
  }

  /**
   * Claims every id for the session, or none: the id that is already in flight (or repeated
   * within the body) when there is one, else the claim, to release once answered.
   */
  claim(sessionId: string, ids: RpcId[]): { conflict: RpcId } | HeldIds {
    if (ids.length === 0) return new HeldIds(null, ids);
    const { held } = this.idsOf(sessionId);
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      // indexOf and includes compare strictly: 7 and "7" are not a repeat.
      if (held.includes(id) || ids.indexOf(id) !== i) return { conflict: id };
    }
    for (const id of ids) held.push(id);
    return new HeldIds(held, ids);
  }

  /**
   * Claims the one id of a single request (a plain tools/call) without a claim object: the ids it
   * joined, to release it from with releaseId once answered, and then `settle`; null when the id
   * is in flight.
   */
  claimOne(sessionId: string, id: RpcId): Held | null {
    const { held, plain } = this.idsOf(sessionId);
    if (held.includes(id)) return null;
    held.push(id);
    plain.push(id);
    return held;
  }

  /**
   * The ids a client cancelled while in flight (notifications/cancelled), per session: made only
   * when one is cancelled, so a call asks an empty map.
   */
  private readonly cancelledIds = new Map<string, Held>();

  /**
   * Marks the id of a plain tools/call in flight on the session as cancelled by its client; false
   * for any other id. Only those: `settle` drops the mark when the call is answered. An id the SDK
   * answers (a batch, a call with a progressToken) is never settled, so its mark would outlast the
   * call and refuse a later plain call reusing the id, unrun.
   */
  cancel(sessionId: string, id: RpcId): boolean {
    if (!this.bySession.get(sessionId)?.plain.includes(id)) return false;
    let list = this.cancelledIds.get(sessionId);
    if (list === undefined) {
      list = [];
      this.cancelledIds.set(sessionId, list);
    }
    if (!list.includes(id)) list.push(id);
    return true;
  }

  isCancelled(sessionId: string, id: RpcId): boolean {
    if (this.cancelledIds.size === 0) return false;
    return this.cancelledIds.get(sessionId)?.includes(id) ?? false;
  }

  /**
   * The plain call of `id` (claimOne) was answered: it is no longer one, and its cancellation
   * mark, if any, goes with it.
   */
  settle(sessionId: string, id: RpcId): void {
    const ids = this.bySession.get(sessionId);
    if (ids !== undefined) releaseId(ids.plain, id);
    if (this.cancelledIds.size === 0) return;
    const list = this.cancelledIds.get(sessionId);
    if (list === undefined) return;
    releaseId(list, id);
    if (list.length === 0) this.cancelledIds.delete(sessionId);
  }

  forget(sessionId: string): void {
    this.bySession.delete(sessionId);
    this.cancelledIds.delete(sessionId);
  }
}

/** The request id a notifications/cancelled body names; undefined for any other body. */
export function cancelledRequestId(body: unknown): RpcId | undefined {
  const message = body as { method?: unknown; params?: { requestId?: unknown } } | null;
  if (message?.method !== 'notifications/cancelled') return undefined;
  const id = message.params?.requestId;
  return typeof id === 'string' || typeof id === 'number' ? id : undefined;
}
