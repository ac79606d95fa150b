import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../adapters/bus/contract.ts';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { allEventsFilter } from '../adapters/bus/subjects.ts';
import { openPostgresEventStore } from '../adapters/event-store/postgres.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { Relay } from '../services/relay/relay.ts';
import { dropSchemas, POSTGRES_URL, shouldRunPostgresSuite, uniqueSchema } from '../test/postgres-probe.ts';
import type { Projection } from './projection.ts';
import { ProjectionRunner } from './runner.ts';

const run = await shouldRunPostgresSuite('log feed on PostgreSQL');
const logger = pino({ level: 'silent' });
const schemas: string[] = [];
afterAll(() => dropSchemas(schemas));

const positions: Projection<number[]> = {
  name: 'positions',
  version: 1,
  initial: () => [],
  evolve(state, event) {
    state.push(event.position);
    return state;
  },
};

/**
 * The restart of a projections process: its projections join the log feed first, with their
 * saved checkpoints, and the relay joins while their first read is still in flight on a remote
 * store, with a checkpoint further back. The page that read returns starts past the relay's
 * checkpoint; taking it would skip every event in between (they never reach the bus).
 */
describe.runIf(run)('the log feed on a store whose reads take a round trip', () => {
  it('hands a member that joins behind a read in flight every event, none skipped', async () => {
    const schema = uniqueSchema('feed');
    schemas.push(schema);
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 100, logger });
    const bus = new MemoryBus();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 30; i++) {
        const batch = Array.from({ length: 10 }, () => ({
          id: randomUUID(),
          type: 'VerdictRecorded',
          data: { i },
        }));
        ids.push(...batch.map((e) => e.id!));
        await store.append(`market-${i % 3}`, batch);
      }
      const all = await store.readAll({ maxCount: 1_000 });
      const checkpoints = new MemoryProjectionStore();
      // The projection had folded up to the 250th event before the restart; the relay had
      // published only the first 40.
      await checkpoints.save('positions', {
        version: 1,
        checkpoint: all[249]!.position,
        state: all.slice(0, 250).map((e) => e.position),
      });
      await checkpoints.save('relay', { version: 1, checkpoint: all[39]!.position, state: null });
      // A projection further back too (the outcome resolver's pending view, say).
      await checkpoints.save('behind', {
        version: 1,
        checkpoint: all[99]!.position,
        state: all.slice(0, 100).map((e) => e.position),
      });
      const runner = new ProjectionRunner(store, checkpoints, positions, { logger });
      const behind = new ProjectionRunner(store, checkpoints, { ...positions, name: 'behind' }, { logger });
      const relay = new Relay({ store, bus, checkpoints, logger });
      await runner.start();
      await Promise.all([relay.start(), behind.start()]);

      const seen: RecordedEvent[] = [];
      const consumer = await bus.consume(
        { durable: 'all', filterSubject: allEventsFilter('sig') },
        async (m) => {
          seen.push(JSON.parse(new TextDecoder().decode(m.data)) as RecordedEvent);
          await m.ack();
        },
      );
      const head = all.at(-1)!.position;
      await waitFor(
        () =>
          relay.checkpoint === head &&
          runner.checkpoint === head &&
          behind.checkpoint === head &&
          seen.length >= ids.length - 40,
        'the relay and the projection at the head',
        20_000,
      );
      await relay.stop();
      await runner.stop();
      await behind.stop();
      await consumer.stop();
      expect(seen.map((e) => e.id)).toEqual(ids.slice(40));
      expect(runner.state).toEqual(all.map((e) => e.position));
      expect(behind.state).toEqual(all.map((e) => e.position));
    } finally {
      await bus.close();
      await store.close();
    }
  });

  it("reads each event once: the store's doorbell rings the feed without reading the log", async () => {
    const schema = uniqueSchema('feedbell');
    schemas.push(schema);
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 60_000, logger });
    const other = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 60_000, logger });
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), positions, { logger });
    let decoded = 0;
    const readAll = store.readAll.bind(store);
    store.readAll = async (options) => {
      const page = await readAll(options);
      decoded += page.length;
      return page;
    };
    try {
      await runner.start();
      const appended: number[] = [];
      for (let round = 0; round < 10; round++) {
        // This process's appends ring the feed at once; the other's through its NOTIFY (the poll
        // is a minute away).
        const mine = Array.from({ length: 5 }, (_, i) =>
          store.append(`own-${i}`, [{ id: randomUUID(), type: 'N', data: { round, i } }]),
        );
        const theirs = other.append('theirs', [{ id: randomUUID(), type: 'N', data: { round } }]);
        for (const result of await Promise.all([...mine, theirs])) appended.push(result.position);
        await runner.waitFor(Math.max(...appended), 20_000);
      }
      expect(runner.state).toEqual([...appended].sort((a, b) => a - b));
      // A subscription kept open as the doorbell read and decoded every event a second time.
      expect(decoded).toBe(appended.length);
    } finally {
      await runner.stop();
      await other.close();
      await store.close();
    }
  });
});
