import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { freePort } from '../../test/ports.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { NoEventStoreError } from './port.ts';
import { openPostgresEventStore } from './postgres.ts';

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
});
