import pg from 'pg';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresEventStore, type PostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { leaseLockKey } from '../../adapters/event-store/postgres-lease.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { parseDomainEvent } from '../../contracts/events.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { HOUR, recordHistory } from '../../test/history-harness.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { runHistoryCommand } from './cli-commands.ts';
import { type PendingOutcomes, pendingOutcomesProjection } from './projections.ts';
import { OutcomeResolver } from './resolver.ts';

const run = await shouldRunPostgresSuite('two outcome resolvers on one PostgreSQL log');
const logger = pino({ level: 'silent' });
const schemas: string[] = [];
const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await dropSchemas(schemas);
});

type Feed = Awaited<ReturnType<typeof recordHistory>>['feed'];

/** One projections process: its own connections to the shared log, its own pending view and resolver. */
async function projectionsProcess(schema: string, feed: Feed) {
  const store: PostgresEventStore = await openPostgresEventStore({
    url: POSTGRES_URL,
    schema,
    pollMs: 50,
    logger,
  });
  const pending = new ProjectionRunner<PendingOutcomes>(
    store,
    new MemoryProjectionStore(),
    pendingOutcomesProjection,
    {
      logger,
    },
  );
  await pending.start();
  const resolver = new OutcomeResolver({
    store,
    feed,
    pending,
    logger,
    maxLag: 1_000,
    concurrency: 4,
    lease: store.lease('outcome-resolver'),
  });
  closing.push(async () => {
    await resolver.stop();
    if (pending.running) await pending.stop();
    await store.close();
  });
  return { store, pending, resolver };
}

/** A log of `steps` recorded closes in a schema of its own, and two projections processes on it. */
async function twoProcesses(name: string, steps: number) {
  const schema = uniqueSchema(name);
  schemas.push(schema);
  const writer = await openPostgresEventStore({ url: POSTGRES_URL, schema, logger });
  closing.push(() => writer.close());
  const fx = await recordHistory({ steps, store: writer, settleHours: 0 });
  closing.push(() => fx.engine.close());
  const a = await projectionsProcess(schema, fx.feed);
  const b = await projectionsProcess(schema, fx.feed);
  return { schema, writer, fx, a, b };
}

/** Every outcome in the log, by the verdict it labels. */
async function outcomesByVerdict(store: PostgresEventStore): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const event of await store.readAll({ maxCount: 100_000 })) {
    const e = parseDomainEvent(event);
    if (e?.type === 'VerdictOutcomeResolved')
      counts.set(e.data.verdictId, (counts.get(e.data.verdictId) ?? 0) + 1);
  }
  return counts;
}

describe.runIf(run)('two outcome resolvers on one PostgreSQL log', () => {
  it('write one unbroken chain per stream: the second stands by, then takes over from the first', async () => {
    const { writer, fx, a, b } = await twoProcesses('resolver_lease', 30);

    // Outcomes fall due an hour at a time, and both resolve each hour at once.
    const verify = async () =>
      JSON.parse(
        await runHistoryCommand(['verify', '--store'], { openStore: async () => writer, progress: null }),
      );
    for (let h = 0; h < 15; h++) {
      fx.feed.clock.advance(HOUR);
      await Promise.all([a.resolver.resolveDue(), b.resolver.resolveDue()]);
    }
    expect(a.resolver.resolved + b.resolver.resolved).toBeGreaterThan(0);
    const firstHalf = await verify();
    expect(firstHalf.firstBroken ?? null).toBeNull();
    expect(firstHalf.ok).toBe(true);
    // One of the two holds the lease; the other resolved nothing.
    const [holder, standby] = a.resolver.resolved > 0 ? [a, b] : [b, a];
    expect(standby.resolver.resolved).toBe(0);
    expect(standby.resolver.standingBy).toBe(true);

    // The holder stops: the other takes over and chains on from the holder's outcomes.
    await holder.resolver.stop();
    for (let h = 0; h < 20; h++) {
      fx.feed.clock.advance(HOUR);
      await standby.resolver.resolveDue();
    }
    expect(standby.resolver.standingBy).toBe(false);
    expect(standby.resolver.resolved).toBeGreaterThan(0);

    const verdicts = (await writer.readAll({ maxCount: 100_000 })).filter(
      (e) => e.type === 'VerdictRecorded',
    ).length;
    const outcomes = await outcomesByVerdict(writer);
    expect([...outcomes.values()].every((n) => n === 1)).toBe(true);
    expect(outcomes.size).toBe(verdicts);
    const all = await verify();
    expect(all.firstBroken ?? null).toBeNull();
    expect(all.ok).toBe(true);
  }, 120_000);

  it("hands the lease over when the holder's connection dies, and gives it back when the store closes", async () => {
    const { schema, writer, fx, a, b } = await twoProcesses('resolver_lease_death', 40);
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    closing.push(() => admin.end());
    // The session holding the resolver's lock on this schema, if any.
    const key = leaseLockKey(schema, 'outcome-resolver');
    const holderPid = async () => {
      const { rows } = await admin.query<{ pid: number }>(
        `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
         AND classid = $1::bigint::oid AND objid = $2::bigint::oid`,
        [String(BigInt.asUintN(64, key) >> 32n), String(BigInt.asUintN(32, key))],
      );
      return rows[0]?.pid ?? null;
    };
    const tickBoth = async (hours: number) => {
      for (let h = 0; h < hours; h++) {
        fx.feed.clock.advance(HOUR);
        await a.resolver.resolveDue();
        await b.resolver.resolveDue();
      }
    };

    await tickBoth(5);
    const [holder, standby] = a.resolver.resolved > 0 ? [a, b] : [b, a];
    expect(standby.resolver.standingBy).toBe(true);
    const pid = await holderPid();
    expect(pid).not.toBeNull();

    // An operator (or a proxy) ends the holder's lease session; its pool connections live on.
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    while ((await holderPid()) === pid) await new Promise((resolve) => setImmediate(resolve));
    await standby.resolver.resolveDue();
    expect(standby.resolver.standingBy).toBe(false);
    const before = holder.resolver.resolved;
    await holder.resolver.resolveDue();
    expect(holder.resolver.standingBy).toBe(true);
    await tickBoth(5);
    expect(holder.resolver.resolved).toBe(before);
    expect(standby.resolver.resolved).toBeGreaterThan(0);

    // The standby's store closes (its resolver never stopped): the lock goes with it.
    await standby.store.close();
    expect(await holderPid()).toBeNull();
    for (let h = 0; h < 20; h++) {
      fx.feed.clock.advance(HOUR);
      await holder.resolver.resolveDue();
    }
    expect(holder.resolver.standingBy).toBe(false);
    expect(holder.resolver.resolved).toBeGreaterThan(before);

    const verdicts = (await writer.readAll({ maxCount: 100_000 })).filter(
      (e) => e.type === 'VerdictRecorded',
    ).length;
    const outcomes = await outcomesByVerdict(writer);
    expect([...outcomes.values()].every((n) => n === 1)).toBe(true);
    expect(outcomes.size).toBe(verdicts);
    const report = JSON.parse(
      await runHistoryCommand(['verify', '--store'], { openStore: async () => writer, progress: null }),
    );
    expect(report.firstBroken ?? null).toBeNull();
    expect(report.ok).toBe(true);
  }, 120_000);
});
