import { randomBytes } from 'node:crypto';
import net from 'node:net';
import pg from 'pg';

export const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/**
 * Null when PostgreSQL answers, else why not. Suites skip (loudly) only outside CI; with CI=true
 * they run and fail, so an unreachable server never passes silently.
 */
export async function postgresUnreachable(url = POSTGRES_URL): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function shouldRunPostgresSuite(name: string): Promise<boolean> {
  const unreachable = await postgresUnreachable();
  if (unreachable === null || process.env.CI === 'true') return true;
  console.warn(`\n*** PostgreSQL at ${POSTGRES_URL} unreachable (${unreachable}): ${name} NOT RUN ***\n`);
  return false;
}

/** A schema name no other test run uses (other agents share the server). */
export function uniqueSchema(prefix = 'es_test'): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
}

/** Drops test schemas (and everything in them) so the shared database does not fill up. */
export async function dropSchemas(schemas: Iterable<string>, url = POSTGRES_URL): Promise<void> {
  const list = [...schemas];
  if (list.length === 0) return;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const schema of list) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * Terminates the backends of the event store on `schema` (pool and listener, named after the
 * schema), as an operator or a failover would: the server itself stays up for everyone else.
 */
export async function terminateBackends(schema: string, url = POSTGRES_URL): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>(
      `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
       WHERE application_name IN ($1, $2) AND pid <> pg_backend_pid()`,
      [`es:${schema}`, `es-listen:${schema}`],
    );
    return Number(rows[0]!.n);
  } finally {
    await client.end();
  }
}

/**
 * A TCP relay in front of PostgreSQL that a test can cut and restore on the same port: the
 * service sees its server go away and come back, while the shared server stays up for others.
 */
export function postgresRelay(url = POSTGRES_URL) {
  const target = new URL(url);
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  };
  const relay = {
    /** The database URL through the relay. */
    get url() {
      const through = new URL(url);
      through.hostname = '127.0.0.1';
      through.port = String(port);
      return through.toString();
    },
    async start(): Promise<void> {
      server = net.createServer((inbound) => {
        const outbound = net.connect(Number(target.port || 5432), target.hostname);
        track(inbound);
        track(outbound);
        inbound.on('close', () => outbound.destroy());
        outbound.on('close', () => inbound.destroy());
        inbound.pipe(outbound).pipe(inbound);
      });
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
      port = (server.address() as net.AddressInfo).port;
    },
    /** Refuses new connections and drops the open ones. */
    async cut(): Promise<void> {
      const closing = new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
      for (const socket of sockets) socket.destroy();
      await closing;
      server = null;
    },
  };
  return relay;
}

/**
 * A relay to PostgreSQL that can go silent: its connections stay open and new ones are taken, but
 * nothing is passed on either way, as a partition or a hung server looks to the client.
 */
export async function silenceableRelay(url = POSTGRES_URL) {
  const target = new URL(url);
  const sockets = new Set<net.Socket>();
  let silent = false;
  const server = net.createServer((inbound) => {
    sockets.add(inbound);
    inbound.on('close', () => sockets.delete(inbound));
    inbound.on('error', () => inbound.destroy());
    if (silent) return;
    const outbound = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(outbound);
    outbound.on('close', () => sockets.delete(outbound));
    outbound.on('error', () => outbound.destroy());
    inbound.on('close', () => outbound.destroy());
    outbound.on('close', () => inbound.destroy());
    inbound.on('data', (chunk) => {
      if (!silent) outbound.write(chunk);
    });
    outbound.on('data', (chunk) => {
      if (!silent) inbound.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const through = new URL(url);
  through.hostname = '127.0.0.1';
  through.port = String((server.address() as net.AddressInfo).port);
  return {
    url: through.toString(),
    silence() {
      silent = true;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
