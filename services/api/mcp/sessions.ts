import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Logger } from 'pino';

interface Session {
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
 * The total is split in two pools: anonymous owners (a client address) hold at most
 * `maxAnonymous` of `maxSessions` together, keyed owners the rest, and the total cap evicts only
 * within the opener's pool. Addresses are cheap (an IPv6 /64 holds 2^64 of them), so with one
 * pool a flood of anonymous sessions pushed out every keyed one; now it can only push out
 * anonymous sessions.
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
  private anonymous = 0;
  private uses = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly options: {
      idleMs: number;
      sweepIntervalMs?: number;
      logger?: Logger;
      maxSessions?: number;
      maxPerOwner?: number;
      /**
       * Of `maxSessions`, the most anonymous owners (`anonymous:…`) hold together; keyed owners
       * hold the rest. Unset: half of it, rounded up (at least one left for keyed owners).
       */
      maxAnonymous?: number;
      /** Told the number of open sessions whenever it changes. */
      onCount?: (open: number) => void;
    },
  ) {
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

  /** The most sessions each pool holds: [anonymous, keyed]. */
  get pools(): [anonymous: number, keyed: number] {
    const total = this.options.maxSessions ?? Number.POSITIVE_INFINITY;
    if (total === Number.POSITIVE_INFINITY) return [total, total];
    const anonymous = Math.max(1, Math.min(this.options.maxAnonymous ?? Math.ceil(total / 2), total - 1));
    return [anonymous, Math.max(1, total - anonymous)];
  }

  /**
   * Makes room for one more session of `owner` under its caps, closing the least recently used
   * ones (its own for the per-owner cap, its pool's for the total); returns how many were closed.
   */
  async makeRoom(owner: string): Promise<number> {
    let closed = 0;
    const perOwner = this.options.maxPerOwner ?? Number.POSITIVE_INFINITY;
    while (this.countOf(owner) >= perOwner) {
      const oldest = this.leastRecentlyUsed((s) => s.owner === owner);
      if (oldest === undefined) break;
      await this.close(oldest);
      closed++;
    }
    const anonymous = isAnonymous(owner);
    const [anonymousCap, keyedCap] = this.pools;
    const cap = anonymous ? anonymousCap : keyedCap;
    while ((anonymous ? this.anonymous : this.sessions.size - this.anonymous) >= cap) {
      const oldest = this.leastRecentlyUsed((s) => isAnonymous(s.owner) === anonymous);
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
    owner = 'unknown',
    credential: string | null = null,
  ): void {
    const previous = this.sessions.get(id);
    if (previous !== undefined) this.uncount(previous.owner);
    this.sessions.set(id, { server, transport, lastSeen: Date.now(), used: ++this.uses, owner, credential });
    this.owned.set(owner, this.countOf(owner) + 1);
    if (isAnonymous(owner)) this.anonymous++;
    this.options.onCount?.(this.sessions.size);
  }

  /**
   * The session, marked as used now; undefined when unknown, already closed, or asked for by
   * another caller than the one that opened it (when `by` is given): a session id is bound to its
   * owner (MCP's security guidance), so another caller that learns it can neither read its stream
   * nor close it, and is told no more than for an unknown id. The credential it was opened with
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

  private uncount(owner: string): void {
    const n = this.countOf(owner) - 1;
    if (n > 0) this.owned.set(owner, n);
    else this.owned.delete(owner);
    if (isAnonymous(owner)) this.anonymous--;
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
    this.uncount(session.owner);
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
    this.uncount(session.owner);
    this.options.onCount?.(this.sessions.size);
    await session.transport.close().catch(() => undefined);
    await session.server.close().catch(() => undefined);
  }

  async closeAll(): Promise<void> {
    clearInterval(this.timer);
    for (const id of [...this.sessions.keys()]) await this.close(id);
  }
}

/** An anonymous owner (a client address, as sessionOwner names it) rather than a key. */
function isAnonymous(owner: string): boolean {
  return owner.startsWith('anonymous:');
}
