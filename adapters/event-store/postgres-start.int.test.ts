import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { freePort } from '../../test/ports.ts';
import { startPrivatePostgres } from '../../test/postgres-private.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  postgresUnreachable,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { NoEventStoreError } from './port.ts';
import { openPostgresEventStore } from './postgres.ts';
import { migrationLockKey } from './postgres-schema.ts';

const run = await shouldRunPostgresSuite('PostgreSQL start refusals');

/**
 * What an operator reads in the `failed to start` line when the server cannot be used: PostgreSQL
 * and its address by name (the password masked), and the setting to correct; before, the driver's
 * bare `connect ECONNREFUSED 127.0.0.1:<port>` or `database "x" does not exist`.
 */
describe.runIf(run)('opening the PostgreSQL event store', () => {
  it('names PostgreSQL, its address and POSTGRES_URL when nothing answers there', async () => {
    const port = await freePort();
    const url = `postgres://signal:s3cret@127.0.0.1:${port}/signals`;
    const error = await openPostgresEventStore({ url, schema: uniqueSchema() }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(Error);
    const { message } = error as Error;
    expect(message).toContain(
      `PostgreSQL at postgres://signal:***@127.0.0.1:${port}/signals (POSTGRES_URL) is unreachable: connect ECONNREFUSED 127.0.0.1:${port}. `,
    );
    expect(message).toContain("Start the server, or correct POSTGRES_URL's host and port");
    expect(message).not.toContain('s3cret');
  });

  // The loopback server serves no SSL: a URL that asks for it is refused with the driver's bare
  // 'The server does not support SSL connections' (and pg's warning on sslmode=require printed
  // above it), which named neither PostgreSQL, POSTGRES_URL nor what to correct.
  for (const mode of ['require', 'verify-full', 'prefer']) {
    it(`names the SSL mode to correct when POSTGRES_URL asks for SSL (sslmode=${mode}) of a server without it`, async () => {
      const warnings: string[] = [];
      const onWarning = (warning: Error) => warnings.push(warning.message);
      process.on('warning', onWarning);
      onTestFinished(() => {
        process.off('warning', onWarning);
      });
      const url = new URL(POSTGRES_URL);
      url.password = 's3cret';
      url.searchParams.set('sslmode', mode);
      const error = await openPostgresEventStore({ url: url.toString(), schema: uniqueSchema() }).catch(
        (err: unknown) => err,
      );
      expect(error).toBeInstanceOf(DependencyRefusedError);
      const { message } = error as Error;
      expect(message).toMatch(
        new RegExp(
          `^PostgreSQL at postgres://[^ ]*:\\*\\*\\*@[^ ]*sslmode=${mode} \\(POSTGRES_URL\\) does not accept SSL: The server does not support SSL connections, ` +
            `which POSTGRES_URL's sslmode=${mode} asks for\\. To fix it, set sslmode=disable in POSTGRES_URL, ` +
            'or enable SSL on the server$',
        ),
      );
      expect(message).not.toContain('s3cret');
      // pg's multi-line SECURITY WARNING on sslmode=require and prefer is not printed.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((w) => w.includes('SECURITY WARNING'))).toEqual([]);
    });
  }

  it('names the SSL mode to correct when the server accepts only SSL and POSTGRES_URL does not ask for it', async () => {
    // A server of its own with SSL on (a self-signed certificate) whose pg_hba.conf, once it
    // answers, takes SSL connections only.
    const dir = mkdtempSync(join(tmpdir(), 'pg-ssl-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const key = join(dir, 'server.key');
    const cert = join(dir, 'server.crt');
    const hba = join(dir, 'pg_hba.conf');
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-days', '1'].concat([
        '-keyout',
        key,
        '-out',
        cert,
      ]),
      { stdio: 'ignore' },
    );
    writeFileSync(hba, 'local all all trust\nhost all all 127.0.0.1/32 trust\n');
    chmodSync(key, 0o600);
    if (process.getuid?.() === 0) {
      // The server runs as the packaged postgres user (startPrivatePostgres), which must own the key.
      const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
      for (const file of [dir, key, cert, hba]) chownSync(file, uid, gid);
    }
    const server = await startPrivatePostgres({
      ssl: 'on',
      ssl_cert_file: cert,
      ssl_key_file: key,
      hba_file: hba,
    });
    onTestFinished(() => server.stop());
    writeFileSync(hba, 'local all all trust\nhostssl all all 127.0.0.1/32 trust\n');
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('SELECT pg_reload_conf()');
    await admin.end();
    // The reload is taken by the server on its own time: a connection without SSL is refused once it is.
    while ((await postgresUnreachable(server.url)) === null) await new Promise((r) => setTimeout(r, 50));
    const error = await openPostgresEventStore({ url: server.url, schema: uniqueSchema() }).catch(
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(DependencyRefusedError);
    expect((error as Error).message).toMatch(
      new RegExp(
        `^PostgreSQL at ${server.url} \\(POSTGRES_URL\\) accepts SSL connections only: no pg_hba\\.conf entry for .*no encryption\\. ` +
          "To fix it, set sslmode=verify-full in POSTGRES_URL \\(with sslrootcert=<the server's CA file> for a certificate of a private CA\\), " +
          "or allow connections without SSL in the server's pg_hba\\.conf$",
      ),
    );
  }, 180_000);

  it('with create: false refuses a schema that holds no log and creates nothing, and opens one that does', async () => {
    const schema = uniqueSchema('nolog');
    onTestFinished(() => dropSchemas([schema]));
    const error = await openPostgresEventStore({ url: POSTGRES_URL, schema, create: false }).catch(
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(NoEventStoreError);
    expect((error as Error).message).toContain(`POSTGRES_SCHEMA=${schema} at `);
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    const named = () => client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    expect((await named()).rowCount).toBe(0);
    await (await openPostgresEventStore({ url: POSTGRES_URL, schema })).close();
    expect((await named()).rowCount).toBe(1);
    await client.end();
    await (await openPostgresEventStore({ url: POSTGRES_URL, schema, create: false })).close();
  });

  it('names the database to create when the server has none of that name', async () => {
    const database = `absent_${randomBytes(4).toString('hex')}`;
    const url = new URL(POSTGRES_URL);
    url.pathname = `/${database}`;
    const error = await openPostgresEventStore({ url: url.toString(), schema: uniqueSchema() }).catch(
      (err: unknown) => err,
    );
    expect((error as Error).message).toMatch(
      new RegExp(
        `^PostgreSQL at .*/${database} \\(POSTGRES_URL\\) refused the login: database "${database}" does not exist\\. ` +
          "To fix it, create the database \\(createdb\\) or correct POSTGRES_URL's database$",
      ),
    );
  });

  /** A login role of the test server (trust auth) with `settings`, for one test; dropped after it. */
  async function role(settings: string): Promise<string> {
    const name = `refused_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    await admin.query(`CREATE ROLE ${name} LOGIN`);
    if (settings !== '') await admin.query(`ALTER ROLE ${name} ${settings}`);
    onTestFinished(async () => {
      await admin.query(`DROP ROLE ${name}`);
      await admin.end();
    });
    const url = new URL(POSTGRES_URL);
    url.username = name;
    url.password = 'unused';
    return url.toString();
  }

  for (const [what, settings, words] of [
    [
      'a user without CREATE on the database',
      '',
      /permission denied .*To fix it, grant POSTGRES_URL's user CREATE on the database/,
    ],
    [
      'a read-only user',
      'SET default_transaction_read_only = on',
      /read-only transaction.*To fix it, point POSTGRES_URL at the primary/,
    ],
  ] as const) {
    it(`names the schema it could not set up and what to correct, for ${what}`, async () => {
      const url = await role(settings);
      const schema = uniqueSchema();
      const error = await openPostgresEventStore({ url, schema }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(DependencyRefusedError);
      const { message } = error as Error;
      expect(message).toMatch(
        new RegExp(`^PostgreSQL at .* \\(POSTGRES_URL\\) refused setting up schema ${schema}: `),
      );
      expect(message).toMatch(words);
      expect(message).not.toContain('unused');
    });
  }

  /**
   * The backends a store on `schema` has on the server (its pool's and listener's
   * connections are named after the schema), and of them those waiting on an advisory lock.
   */
  async function backendsOf(client: pg.Client, schema: string) {
    const { rows } = await client.query<{ all: number; waiting: number }>(
      `SELECT count(*)::int AS all,
              count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory')::int AS waiting
         FROM pg_stat_activity WHERE application_name = ANY($1)`,
      [[`es:${schema}`, `es-listen:${schema}`]],
    );
    return rows[0]!;
  }

  /** This process's TCP sockets (a pool's connections among them). */
  const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;

  /** Polls `observe` until `done` holds of what it saw (or a generous bound passes): the last sight. */
  async function settled<T>(observe: () => Promise<T> | T, done: (seen: T) => boolean): Promise<T> {
    for (let tries = 0; ; tries++) {
      const seen = await observe();
      if (done(seen) || tries === 500) return seen;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it("on an abort while its migration waits on another process's schema lock, ends that wait on the server and its pool, and opens once the lock is free", async () => {
    const schema = uniqueSchema('es_open_abort');
    const holder = new pg.Client({ connectionString: POSTGRES_URL });
    await holder.connect();
    onTestFinished(async () => {
      await holder.end();
      await dropSchemas([schema]);
    });
    // Another process migrating the same schema: it holds the lock until it is done.
    await holder.query('SELECT pg_advisory_lock($1)', [migrationLockKey(schema).toString()]);
    const socketsBefore = sockets();
    const stop = new AbortController();
    const opening = openPostgresEventStore({ url: POSTGRES_URL, schema, signal: stop.signal });
    opening.catch(() => undefined);
    // The open's connection is there, asking for the lock the holder has.
    expect(
      (
        await settled(
          () => backendsOf(holder, schema),
          (seen) => seen.all === 1,
        )
      ).all,
    ).toBe(1);
    const reason = new Error('stopping');
    stop.abort(reason);
    await expect(opening).rejects.toBe(reason);
    // Nothing of the open is left: no backend on the server (the one waiting on the lock ended,
    // not left to take it once it is free), no connection in this process.
    const left = () => backendsOf(holder, schema).then((seen) => ({ ...seen, sockets: sockets() }));
    const expected = { all: 0, waiting: 0, sockets: socketsBefore };
    expect(await settled(left, (seen) => seen.all === 0 && seen.sockets === socketsBefore)).toEqual(expected);
    await holder.query('SELECT pg_advisory_unlock($1)', [migrationLockKey(schema).toString()]);
    const created = await holder.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    expect(created.rowCount).toBe(0);
    // The lock free, an open (no abort) migrates the schema and serves.
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    expect(await store.health()).toMatchObject({ ok: true });
    await store.close();
  });
});
