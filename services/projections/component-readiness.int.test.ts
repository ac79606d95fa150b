import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { openPostgresEventStore, type PostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import type { Adapters } from '../adapters.ts';
import { Readiness } from '../shared/readiness.ts';
import { projectionsComponent } from './component.ts';

const run = await shouldRunPostgresSuite("the projections role's checks on PostgreSQL");

// deploy/README's fault table: while PostgreSQL is down the projections role also fails its
// projections' checks. Positions there are byte offsets, so the check shows no lag, but it still
// reads the head: a store that cannot answer it fails the check.
describe.runIf(run)("the projections role's per-projection checks on PostgreSQL", () => {
  const schema = uniqueSchema('projection_check');
  let store: PostgresEventStore | undefined;
  afterAll(async () => {
    await store?.close().catch(() => undefined);
    await dropSchemas([schema]);
  });

  it('are ready while the head answers, and not ready once the store cannot answer', async () => {
    store = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 100 });
    expect(store.densePositions).toBe(false);
    const { position } = await store.append('s', [{ type: 'Ok', data: {} }]);
    const component = componentOn(store);
    const readiness = new Readiness();
    for (const [name, check] of Object.entries(component.checks!())) {
      if (name.startsWith('projection:')) readiness.add(name, check);
    }
    for (const runner of component.runners.values()) await runner.start();
    try {
      for (const runner of component.runners.values()) await runner.waitFor(position);
      const up = await readiness.run();
      expect(up.ready).toBe(true);
      for (const result of Object.values(up.checks)) {
        expect(result).toEqual({ ok: true, checkpoint: position });
      }

      await store.close();
      const down = await readiness.run();
      expect(down.ready).toBe(false);
      expect(Object.keys(down.checks)).toEqual([...component.runners.keys()].map((n) => `projection:${n}`));
      for (const result of Object.values(down.checks)) expect(result.ok).toBe(false);
    } finally {
      for (const runner of component.runners.values()) await runner.stop();
    }
  });
});

/** The projections role on the given store, nothing else of a deployment. */
const componentOn = (eventStore: EventStore) =>
  projectionsComponent({
    config: loadConfig({}),
    adapters: {
      eventStore,
      projectionStore: new MemoryProjectionStore(),
      bus: new MemoryBus(),
    } as Partial<Adapters> as Adapters,
    logger: pino({ level: 'silent' }),
    metrics: null,
  });

describe("the projections role's per-projection checks where positions count events", () => {
  it('show the lag behind the head the check read', async () => {
    const store = new MemoryEventStore();
    const { position } = await store.append('s', [{ type: 'Ok', data: {} }]);
    const component = componentOn(store);
    const check = component.checks!()['projection:event-stats']!;
    const runner = component.runners.get('event-stats')!;
    await runner.start();
    try {
      await runner.waitFor(position);
      expect(await check()).toEqual({ ok: true, checkpoint: position, lag: 0 });
    } finally {
      await runner.stop();
    }
  });
});
