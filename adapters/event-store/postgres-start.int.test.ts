import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { POSTGRES_URL, shouldRunPostgresSuite, uniqueSchema } from '../../test/postgres-probe.ts';
import { openPostgresEventStore } from './postgres.ts';

const run = await shouldRunPostgresSuite('PostgreSQL start refusals');

/** A loopback port nothing listens on: taken from the kernel, then given back. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * What an operator reads in the `failed to start` line when the server cannot be used: PostgreSQL
 * and its address by name (the password masked), and the setting to correct; before, the driver's
 * bare `connect ECONNREFUSED 127.0.0.1:<port>` or `database "x" does not exist`.
 */
describe.runIf(run)('opening the PostgreSQL event store', () => {
  it('names PostgreSQL, its address and POSTGRES_URL when nothing answers there', async () => {
    const port = await closedPort();
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
});
