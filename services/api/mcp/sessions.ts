import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Logger } from 'pino';

/** Whose share of the total a session takes: see SessionTable. */
export type SessionPool = 'anonymous' | 'free' | 'paid';

interface Session {
  pool: SessionPool;
  server: Server;
  transport: StreamableHTTPServerTransport;
  lastSeen: number;
  /** Its place in the order of use: larger is more recent (a counter, so two uses in one millisecond still differ). */
  used: number;
  /** Who opened it (a key, or a hashed client address): the per-caller cap counts by this. */
  owner: string;
  /** A digest of the credential it was opened with (null: none), which may use it once that credential is refused. */
  credential: string | null;
}

/**
 * Open MCP sessions by id. Clients often never send DELETE, so a sweep closes sessions idle
 * longer than `idleMs`; without it every abandoned session would stay in memory for good. The
 * table is also capped, per owner and in all: opening one more closes the least recently used
 * session first (the owner's, or its class's for the total), so one client opening sessions in a
 * loop evicts its own and cannot grow memory without bound.
 *
 * The total is split in three pools, and the total cap evicts only within the opener's pool:
 * anonymous owners (a client address) hold at most `maxAnonymous` of `maxSessions` together,
 * free keys at most `maxFree`, paid keys the rest. Addresses are cheap (an IPv6 /64 holds 2^64 of
 * them) and so are free keys (a new wallet signs in to one), so with one pool a flood of either
 * pushed out every paid session; now it pushes out only sessions of its own pool.
 *
 * `touch` only stamps the session (a counter for the order of use, the clock for the sweep):
 * re-inserting it to keep the Map in order of use cost ~1.7 µs of every keyed call on a session
 * (profile, git log -p bench/README.md). Eviction, which only opening a session past a cap needs, scans for
 * the least recently used instead: at the default total cap of 10,000 a scan is well under the
 * cost of opening the session that asks for it. Opening below the caps scans nothing: sessions are
 * counted per owner and per pool as they open and close.
 */
export class SessionTable {
  private readonly sessions = new Map<string, Session>();
  /** Open sessions per owner (an owner with none has no entry). */
  private readonly owned = new Map<string, number>();
  private readonly pooled: Record<SessionPool, number> = { anonymous: 0, free: 0, paid: 0 };
  private uses = 0;
  private readonly timer: NodeJS.Timeout;
  /** The most sessions each pool holds (constant: worked out once from the options). */
  readonly pools: Readonly<Record<SessionPool, number>>;

  constructor(
    private readonly options: {
      idleMs: number;
      sweepIntervalMs?: number;
      logger?: Logger;
      maxSessions?: number;
      maxPerOwner?: number;
      /**
       * Of `maxSessions`, the most anonymous owners hold together, and free keys; paid keys hold
       * the rest. Unset: a quarter each, rounded up. Every pool holds at least one, within the
       * total: so `maxSessions`, when set, is at least 3 (the constructor refuses less, and the
       * config, MCP_MAX_SESSIONS, too).
       */
      maxAnonymous?: number;
      maxFree?: number;
      /** Told the number of open sessions whenever it changes. */
      onCount?: (open: number) => void;
    },
  ) {
    this.pools = poolCaps(options);
    this.timer = setInterval(
      () => {
        this.sweep().catch((err) => options.logger?.warn({ err }, 'mcp session sweep failed'));
      },
      options.sweepIntervalMs ?? Math.min(60_000, Math.max(1_000, Math.floor(options.idleMs / 2))),
    );
    this.timer.unref();
  }

  get size(): number {
    return this.sessions.size;
  }

  /** Sessions open for one owner. */
  countOf(owner: string): number {
    return this.owned.get(owner) ?? 0;
  }

  /**
   * Makes room for one more session of `owner` under its caps, closing the least recently used
   * ones (its own for the per-owner cap, its pool's for the total); returns how many were closed.
   */
  async makeRoom(owner: string, pool: SessionPool): Promise<number> {
    let closed = 0;
    const perOwner = this.options.maxPerOwner ?? Number.POSITIVE_INFINITY;
    while (this.countOf(owner) >= perOwner) {
      const oldest = this.leastRecentlyUsed((s) => s.owner === owner);
      if (oldest === undefined) break;
      await this.close(oldest);
      closed++;
    }
    const cap = this.pools[pool];
    while (this.pooled[pool] >= cap) {
      const oldest = this.leastRecentlyUsed((s) => s.pool === pool);
      if (oldest === undefined) break;
      await this.close(oldest);
      closed++;
    }
    if (closed > 0)
      this.options.logger?.info({ owner, closed }, 'mcp sessions evicted to stay under the cap');
    return closed;
  }

  add(
    id: string,
    server: Server,
    transport: StreamableHTTPServerTransport,
    owner: string,
    credential: string | null,
    pool: SessionPool,
  ): void {
    const previous = this.sessions.get(id);
    if (previous !== undefined) this.uncount(previous);
    const session = { server, transport, lastSeen: Date.now(), used: ++this.uses, owner, credential, pool };
    this.sessions.set(id, session);
    this.owned.set(owner, this.countOf(owner) + 1);
    this.pooled[pool]++;
    this.options.onCount?.(this.sessions.size);
  }

  /**
   * The session, marked as used now; undefined when unknown, already closed, or asked for by
   * another caller than the one that opened it (when `by` is given): a session id is bound to its
   * owner (MCP's security guidance), so another caller that learns it can neither read its stream
   * nor close it (the route's 404 tells it the session is another credential's, nothing of it). The credential it was opened with
   * stays its own after that credential is refused (a revoked key is answered -32003 on it). The
   * credential's digest is asked for only when the owner differs: its opener's calls, the hot
   * path, hash nothing.
   */
  touch(
    id: string,
    by?: { owner: string; credential: () => string | null },
  ): StreamableHTTPServerTransport | undefined {
    const session = this.sessions.get(id);
    if (session === undefined) return undefined;
    if (
      by !== undefined &&
      session.owner !== by.owner &&
      (session.credential === null || session.credential !== by.credential())
    )
      return undefined;
    session.lastSeen = Date.now();
    session.used = ++this.uses;
    return session.transport;
  }

  /**
   * The credential digest a session of this id was opened with, whoever opened it (touch answers
   * only its opener): null when it was opened with none, undefined when no such session is open.
   */
  openedWith(id: string): string | null | undefined {
    return this.sessions.get(id)?.credential;
  }

  private uncount({ owner, pool }: Session): void {
    const n = this.countOf(owner) - 1;
    if (n > 0) this.owned.set(owner, n);
    else this.owned.delete(owner);
    this.pooled[pool]--;
  }

  private leastRecentlyUsed(which: (session: Session) => boolean): string | undefined {
    let oldest: string | undefined;
    let used = Number.POSITIVE_INFINITY;
    for (const [id, session] of this.sessions) {
      if (session.used < used && which(session)) {
        used = session.used;
        oldest = id;
      }
    }
    return oldest;
  }

  forget(id: string): void {
    const session = this.sessions.get(id);
    if (session === undefined) return;
    this.sessions.delete(id);
    this.uncount(session);
    this.options.onCount?.(this.sessions.size);
  }

  async sweep(): Promise<number> {
    const cutoff = Date.now() - this.options.idleMs;
    const idle = [...this.sessions].filter(([, s]) => s.lastSeen < cutoff);
    for (const [id] of idle) await this.close(id);
    if (idle.length > 0) this.options.logger?.debug({ closed: idle.length }, 'idle mcp sessions closed');
    return idle.length;
  }

  async close(id: string): Promise<void> {
    const session = this.sessions.get(id);
    if (session === undefined) return;
    this.sessions.delete(id);
    this.uncount(session);
    this.options.onCount?.(this.sessions.size);
    await session.transport.close().catch(() => undefined);
    await session.server.close().catch(() => undefined);
  }

  /**
   * Closes every session `owner` opened, their event streams with them; returns how many. Scans
   * only when the owner holds one (counted as sessions open and close).
   */
  async closeOwnedBy(owner: string): Promise<number> {
    if (this.countOf(owner) === 0) return 0;
    const owned = [...this.sessions].filter(([, s]) => s.owner === owner).map(([id]) => id);
    for (const id of owned) await this.close(id);
    return owned.length;
  }

  /** Ends every session's standalone GET event stream; the sessions stay open. */
  endStreams(): void {
    for (const session of this.sessions.values()) session.transport.closeStandaloneSSEStream();
  }

  async closeAll(): Promise<void> {
    clearInterval(this.timer);
    for (const id of [...this.sessions.keys()]) await this.close(id);
  }
}

/**
 * The most sessions each pool holds: unbounded without `maxSessions`; else anonymous owners and
 * free keys their shares (a quarter each unset), each held to leave at least one for the others,
 * and paid keys the rest. `maxSessions` below 3 is refused: three pools of at least one each
 * would add up to more than the total.
 */
function poolCaps(options: {
  maxSessions?: number;
  maxAnonymous?: number;
  maxFree?: number;
}): Readonly<Record<SessionPool, number>> {
  const total = options.maxSessions;
  if (total === undefined || total === Number.POSITIVE_INFINITY)
    return Object.freeze({
      anonymous: Number.POSITIVE_INFINITY,
      free: Number.POSITIVE_INFINITY,
      paid: Number.POSITIVE_INFINITY,
    });
  if (!(total >= 3))
    throw new RangeError(`maxSessions must be at least 3 (one session for each pool), got ${total}`);
  const quarter = Math.ceil(total / 4);
  const anonymous = Math.max(1, Math.min(options.maxAnonymous ?? quarter, total - 2));
  const free = Math.max(1, Math.min(options.maxFree ?? quarter, total - anonymous - 1));
  return Object.freeze({ anonymous, free, paid: total - anonymous - free });
}
