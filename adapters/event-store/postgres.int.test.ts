import { afterAll, describe, expect, it } from 'vitest';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { event, eventStoreContract, uniqueStream } from './contract.ts';
import { EventStoreUnavailableError } from './port.ts';
import { openPostgresEventStore } from './postgres.ts';

const run = await shouldRunPostgresSuite('PostgreSQL event store suite');
const schemas: string[] = [];
const fresh = () => {
  const schema = uniqueSchema();
  schemas.push(schema);
  return schema;
};
afterAll(() => dropSchemas(schemas));

if (run) {
  eventStoreContract('postgres', () =>
    openPostgresEventStore({ url: POSTGRES_URL, schema: fresh(), poolSize: 4, pollMs: 200 }),
  );
}

describe.runIf(run)('PostgreSQL event store', () => {
  it('applies its migrations once, even when two processes start at the same time', async () => {
    const schema = fresh();
    const [a, b] = await Promise.all([
      openPostgresEventStore({ url: POSTGRES_URL, schema }),
      openPostgresEventStore({ url: POSTGRES_URL, schema }),
    ]);
    try {
      const { rows } = await a.pool.query(`SELECT version FROM "${schema}".schema_migrations`);
      expect(rows.map((r) => r.version)).toEqual([1]);
      const stream = uniqueStream('shared');
      await a.append(stream, [event('A')]);
      expect(await b.streamRevision(stream)).toBe(0);
    } finally {
      await a.close();
      await b.close();
    }
    const again = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    try {
      expect(await again.headPosition()).toBe(1);
    } finally {
      await again.close();
    }
  });

  it('keeps payload key order and numbers exactly as appended', async () => {
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema: fresh() });
    try {
      const stream = uniqueStream('payload');
      const data = { z: 1, a: 0.1, m: { y: [3, 2, 1], b: 'text with "quotes", \\ and ünïcode' }, n: null };
      await store.append(stream, [event('P', data)]);
      const [read] = await store.readStream(stream);
      expect(JSON.stringify(read!.data)).toBe(JSON.stringify(data));
    } finally {
      await store.close();
    }
  });

  it('refuses a schema name that is not a plain identifier', async () => {
    await expect(openPostgresEventStore({ url: POSTGRES_URL, schema: 'bad"; drop' })).rejects.toThrow(
      /schema name/,
    );
  });

  it('fails to open with a clear error when the server cannot be reached', async () => {
    await expect(
      openPostgresEventStore({ url: 'postgres://postgres@127.0.0.1:1/test', schema: fresh() }),
    ).rejects.toThrow(/ECONNREFUSED|connect/);
  });

  it('reports unhealthy and answers EventStoreUnavailableError once closed', async () => {
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema: fresh() });
    await store.close();
    expect(await store.health()).toMatchObject({ ok: false });
    await expect(store.append(uniqueStream('closed'), [event('A')])).rejects.toBeInstanceOf(
      EventStoreUnavailableError,
    );
  });
});
