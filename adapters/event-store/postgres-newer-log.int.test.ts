import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../../contracts/events.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { runServiceProcess } from '../../test/service-process.ts';
import { event, uniqueStream } from './contract.ts';
import { NewerLogError } from './port.ts';
import { openPostgresEventStore } from './postgres.ts';

const run = await shouldRunPostgresSuite('PostgreSQL newer-log guard');

/** What a newer build's first added type looks like to this one: a name outside its catalog. */
const NEWER = 'AddedByANewerVersion';

const REFUSAL = new RegExp(
  `holds event type ${NEWER}, which this build does not know \\(it knows the ${EVENT_TYPES.length} types of its catalog\\): ` +
    'the log was written by a newer version of the service, and this version refuses it. Run that newer ' +
    'version, or roll back by restoring a backup taken before the upgrade \\(deploy/README.md, Upgrades\\)$',
);

describe.runIf(run)('a PostgreSQL log written by a newer version', () => {
  const schemas: string[] = [];
  const root = mkdtempSync(join(tmpdir(), 'pg-newer-log-'));
  afterAll(async () => {
    await dropSchemas(schemas);
    rmSync(root, { recursive: true, force: true });
  });

  const schema = () => {
    const name = uniqueSchema('newer_log');
    schemas.push(name);
    return name;
  };
  const open = (name: string) => openPostgresEventStore({ url: POSTGRES_URL, schema: name, poolSize: 2 });

  const recordedTypes = async (name: string) => {
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ name: string }>(
        `SELECT name FROM "${name}".event_types ORDER BY name`,
      );
      return rows.map((r) => r.name);
    } finally {
      await client.end();
    }
  };

  /** What a newer build's append of its new type leaves in event_types (the event itself need not be read). */
  const recordNewer = async (name: string) => {
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    try {
      await client.query(`INSERT INTO "${name}".event_types (name) VALUES ($1)`, [NEWER]);
    } finally {
      await client.end();
    }
  };

  it('records each catalog type the first time it is appended, and no type outside the catalog', async () => {
    const name = schema();
    const store = await open(name);
    try {
      const [first, second] = EVENT_TYPES;
      await store.append(uniqueStream('newer'), [event(first!, { n: 1 })]);
      await store.append(uniqueStream('newer'), [event(first!, { n: 2 }), event('TestOnlyType', { n: 3 })]);
      // Two concurrent first appends of one type: recorded once, both written.
      await Promise.all([
        store.append(uniqueStream('newer'), [event(second!, { n: 4 })]),
        store.append(uniqueStream('newer'), [event(second!, { n: 5 })]),
      ]);
      expect(await recordedTypes(name)).toEqual([first, second].sort());
    } finally {
      await store.close();
    }
    // Its own log, reopened: nothing refused.
    const again = await open(name);
    await again.close();
  });

  it('is refused when the store opens, naming the type and what to do', async () => {
    const name = schema();
    const store = await open(name);
    await store.append(uniqueStream('newer'), [event(EVENT_TYPES[0]!, { n: 1 })]);
    await store.close();
    await recordNewer(name);
    const refused = await open(name).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(NewerLogError);
    expect((refused as Error).message).toMatch(
      new RegExp(`^the event log in PostgreSQL schema ${name} ${REFUSAL.source}`),
    );
  });

  it('the service refuses to start on it with one fatal line, exit 1', async () => {
    const name = schema();
    await (await open(name)).close();
    await recordNewer(name);
    const service = runServiceProcess({
      DATA_DIR: mkdtempSync(join(root, 'data-')),
      EVENT_STORE: 'postgres',
      POSTGRES_URL,
      POSTGRES_SCHEMA: name,
    });
    expect(await service.exit).toBe(1);
    const fatal = service.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.msg).toMatch(new RegExp(`^failed to start: .*${REFUSAL.source}`));
    expect(service.lines.some((l) => String(l.msg).startsWith('Server listening'))).toBe(false);
  }, 120_000);
});
