import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Logger } from 'pino';

interface Session {
  server: Server;
  transport: StreamableHTTPServerTransport;
  lastSeen: number;
}

/**
 * Open MCP sessions by id. Clients often never send DELETE, so a sweep closes sessions idle
 * longer than `idleMs`; without it every abandoned session would stay in memory for good.
 */
export class SessionTable {
  private readonly sessions = new Map<string, Session>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly options: {
      idleMs: number;
      sweepIntervalMs?: number;
      logger?: Logger;
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

  add(id: string, server: Server, transport: StreamableHTTPServerTransport): void {
    this.sessions.set(id, { server, transport, lastSeen: Date.now() });
  }

  /** The session, marked as used now; undefined when unknown or already closed. */
  touch(id: string): StreamableHTTPServerTransport | undefined {
    const session = this.sessions.get(id);
    if (session === undefined) return undefined;
    session.lastSeen = Date.now();
    return session.transport;
  }

  forget(id: string): void {
    this.sessions.delete(id);
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
    await session.transport.close().catch(() => undefined);
    await session.server.close().catch(() => undefined);
  }

  async closeAll(): Promise<void> {
    clearInterval(this.timer);
    for (const id of [...this.sessions.keys()]) await this.close(id);
  }
}
