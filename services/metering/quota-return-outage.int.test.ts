import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { openPostgresEventStore, type PostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { type PrivatePostgres, startPrivatePostgres } from '../../test/postgres-private.ts';
import { shouldRunPostgresSuite, uniqueSchema } from '../../test/postgres-probe.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import { QUOTA_FAMILY } from './quota-rebuild.ts';
import { type QuotaSubject, quotaPeriod, quotaWindows } from './windows.ts';

const run = await shouldRunPostgresSuite('quota give-back across a PostgreSQL outage');

const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 60 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};
const DAY = 24 * 3_600_000;
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);

/**
 * A lease's unused units given back while PostgreSQL is down (a restart, a failover): the live
 * counters take the give-back at once, and its record on the log must follow once the server is
 * back. Before, the record was tried three times an idle period apart and then given up ('quota
 * lease not given back: its units stay charged on the log'), so the log charged the key units the
 * counters had given back: found walking a scaled-out deployment, where every PostgreSQL stop of a
 * few seconds under keyed load left the log 1 to 32 units above the calls served, and the next
 * rebuild of the counters from the log (a Redis loss, a restore, rebuild-quota) charged the key
 * for calls it never made.
 */
describe.runIf(run)('a quota give-back while PostgreSQL is down', () => {
  let server: PrivatePostgres;
  let store: PostgresEventStore;
  const lines: string[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });

  beforeAll(async () => {
    server = await startPrivatePostgres();
    store = await openPostgresEventStore({
      url: server.url,
      schema: uniqueSchema('quota_outage'),
      pollMs: 200,
    });
  }, 180_000);

  afterAll(async () => {
    await store?.close();
    await server?.stop();
  });

  it('is recorded on the log once the server is back: the log nets to the calls served, as the counters do', async () => {
    let now = T0;
    const cache = new MemoryCache();
    // The lease ends on the day's change below, not on an idle sweep: the sweep runs every 5 s.
    const meter = new QuotaMeter({
      cache,
      store,
      plans: PLANS,
      now: () => now,
      lease: { ms: 1_000, maxUnits: 64, idleMs: 5_000 },
      logger,
    });
    const subject: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'pro' };
    let served = 0;
    // A busy key: 8 callers of 25 calls, one at a time each, so a lease is granted and holds units.
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let i = 0; i < 25; i++) if ((await meter.debit(subject, 'get_trade_call')).ok) served++;
      }),
    );
    expect(served).toBe(200);
    const netOnLog = async () =>
      (await store.readAll({ maxCount: 100_000 })).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0);
    // A lease used up by the last call holds nothing to give back: calls go on (at most one lease
    // more) until one holds units beyond those served, as a busy key's lease mostly does.
    for (let extra = 0; extra < 64 && (await netOnLog()) <= served; extra++) {
      if ((await meter.debit(subject, 'get_trade_call')).ok) served++;
    }
    // What the lease holds beyond the calls served is on the log.
    expect(await netOnLog()).toBeGreaterThan(served);

    await server.pause();
    // The day changes: the next call ends the day before's lease, whose give-back meets the server
    // down. That call is not served (its own debit cannot be recorded).
    now = T0 + DAY;
    await expect(meter.debit(subject, 'get_trade_call')).rejects.toThrow();
    // Three tries of the record failed: said in the log, given up before the fix.
    await expect
      .poll(() => lines.some((l) => /quota lease (give-back not on the log yet|not given back)/.test(l)), {
        timeout: 60_000,
        interval: 100,
      })
      .toBe(true);

    await server.start();
    await expect.poll(netOnLog, { timeout: 60_000, interval: 200 }).toBe(served);
    const dayBefore = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
    expect(await cache.readLive(QUOTA_FAMILY, dayBefore)).toEqual([served, served]);
    await meter.stop();
    await meter.counters.stop();
    expect(await netOnLog()).toBe(served);
  }, 240_000);
});
