import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresEventStore } from '../adapters/event-store/postgres.ts';
import { newEvent } from '../contracts/events.ts';
import { dropSchemas, POSTGRES_URL, shouldRunPostgresSuite, uniqueSchema } from './postgres-probe.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const run = await shouldRunPostgresSuite('operator commands on a PostgreSQL schema without a log');

/** A script of package.json as npm runs it (node with tsx's loader) on PostgreSQL. */
async function cli(
  entry: string,
  args: string[],
  schema: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, entry), ...args],
      {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          EVENT_STORE: 'postgres',
          POSTGRES_URL,
          POSTGRES_SCHEMA: schema,
          // No service runs here: port 9 (discard) answers nothing.
          PUBLIC_BASE_URL: 'http://127.0.0.1:9',
        },
      },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

async function schemaExists(schema: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    return rows.length > 0;
  } finally {
    await client.end();
  }
}

// Opening the store runs the migrations, so a read on a mistyped POSTGRES_SCHEMA would create it
// empty and answer "no keys", as if it were the service's log: refused instead, as a DATA_DIR
// without a log is on LMDB.
describe.runIf(run)('operator commands on a PostgreSQL schema that holds no log', () => {
  const schemas: string[] = [];
  afterAll(() => dropSchemas(schemas));

  it('refuse it in one line naming the schema, exit 2, and create nothing; on the real log they read', async () => {
    const real = uniqueSchema('op_real');
    const mistyped = uniqueSchema('op_typo');
    schemas.push(real, mistyped);
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema: real });
    await store.append('key-test', [newEvent('ApiKeyRevoked', { keyId: 'k', reason: 'test' })]);
    await store.close();

    const line =
      `POSTGRES_SCHEMA=${mistyped} at ${POSTGRES_URL} holds no event log (no table ${mistyped}.events): ` +
      "set POSTGRES_SCHEMA and POSTGRES_URL to the service's; a command that only reads does not create one\n";
    const refused = await Promise.all([
      cli('services/operator/cli.ts', ['list'], mistyped),
      cli('services/operator/cli.ts', ['payments'], mistyped),
      cli('services/history/cli.ts', ['verify', '--store'], mistyped),
    ]);
    for (const out of refused) expect(out).toEqual({ code: 2, stdout: '', stderr: line });
    expect(await schemaExists(mistyped)).toBe(false);

    expect(await cli('services/operator/cli.ts', ['list'], real)).toMatchObject({
      code: 0,
      stdout: 'no keys\n',
    });
  }, 60_000);
});
