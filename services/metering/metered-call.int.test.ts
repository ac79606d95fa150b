import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { Caller } from './caller.ts';
import { QuotaUnavailableError, serveMetered } from './metered-call.ts';
import type { PlanTable } from './plans.ts';
import { type LeaseOptions, QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';

/** The real in-process cache, counting the reads of live counters (a peek is one read). */
class CountingCache extends MemoryCache {
  reads = 0;
  override readLive(...args: Parameters<MemoryCache['readLive']>) {
    this.reads++;
    return super.readLive(...args);
  }
}

/** Few enough that no lease is taken (16 leases' worth must be left). */
const STARTER_CALLS = 40;
const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 5 },
  starter: { monthly: STARTER_CALLS, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};

const meters: QuotaMeter[] = [];
afterEach(async () => {
  for (const m of meters.splice(0)) await m.counters.stop();
});

function setup(options: { lease?: LeaseOptions } = {}) {
  const cache = new CountingCache();
  const store = new MemoryEventStore();
  const meter = new QuotaMeter({ cache, store, plans: PLANS, ...options });
  meters.push(meter);
  const caller = (plan: 'free' | 'starter' | 'pro'): Caller => ({
    auth: { outcome: 'OK', presented: true, tier: plan },
    subject: { id: `k-${randomUUID()}`, kind: 'key', plan },
    keyId: 'key_test',
  });
  return { cache, store, meter, caller };
}

const call = () => ({ tool: 'get_trade_call' });

describe('serveMetered', () => {
  it("skips the read before the run while a lease holds the call's unit, and still debits every call", async () => {
    const { cache, store, meter, caller } = setup({ lease: { ms: 1_000 } });
    const pro = caller('pro');
    const tool = call().tool;
    let served = 0;
    // A busy key: its calls come close together, so a lease prepays its next ones.
    for (let reads = -1; reads !== cache.reads; served++) {
      reads = cache.reads;
      expect(await serveMetered(meter, pro, { tool }, async () => 'ok')).toMatchObject({
        ok: true,
      });
      expect(served).toBeLessThan(200);
    }
    const before = cache.reads;
    for (let i = 0; i < 5; i++) {
      expect(await serveMetered(meter, pro, call(), async () => i)).toMatchObject({ ok: true, value: i });
      served++;
    }
    expect(cache.reads).toBe(before);
    // A failed prepaid call is not debited; its figures are the ones before the run.
    const failed = await serveMetered(meter, pro, call(), async () => {
      throw new Error('venue down');
    });
    expect(failed).toMatchObject({ ok: false, reason: 'failed', service: { quota: { used: served } } });
    // Stopped, the lease gives back what no call took: the log then holds exactly the calls served.
    await meter.stop();
    expect((await store.readAll()).reduce((sum, e) => sum + debitedUnits(e), 0)).toBe(served);
  });

  it('reads before every call that is not prepaid, and refuses an exhausted caller without running', async () => {
    const { cache, meter, caller } = setup();
    const free = caller('free');
    await meter.peek(free.subject); // the counters' first build reads too
    let runs = 0;
    for (let i = 0; i < 5; i++) {
      const before = cache.reads;
      expect(await serveMetered(meter, free, call(), async () => ++runs)).toMatchObject({ ok: true });
      expect(cache.reads).toBe(before + 1);
    }
    const refused = await serveMetered(meter, free, call(), async () => ++runs);
    expect(refused).toMatchObject({ ok: false, reason: 'quota_exhausted', window: 'daily' });
    expect(runs).toBe(5);
  });

  it('hands back what a call made when its debit loses the race or fails, so it can be released', async () => {
    const { meter, caller } = setup();
    const free = caller('free');
    for (let i = 0; i < 4; i++) await serveMetered(meter, free, call(), async () => ({ i }));
    // Both read the last unit free and run; one debit takes it, the other is refused after its run.
    const both = await Promise.all([
      serveMetered(meter, free, call(), async () => ({ made: 'a' })),
      serveMetered(meter, free, call(), async () => ({ made: 'b' })),
    ]);
    const lost = both.find((o) => !o.ok);
    expect(both.filter((o) => o.ok)).toHaveLength(1);
    expect(lost).toMatchObject({ ok: false, reason: 'quota_exhausted' });
    expect(lost && !lost.ok && lost.reason === 'quota_exhausted' ? lost.ran : null).toEqual({
      made: both[0]!.ok ? 'b' : 'a',
    });

    const pro = caller('pro');
    meter.debit = () => Promise.reject(new Error('store down'));
    const made = { made: 'c' };
    const failed = await serveMetered(meter, pro, call(), async () => made).catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(QuotaUnavailableError);
    expect((failed as QuotaUnavailableError).ran).toBe(made);
  });

  it("takes no lease near the limit, so a busy key's last calls are read first and the refused never run", async () => {
    const { meter, caller } = setup({ lease: { ms: 1_000 } });
    const starter = caller('starter');
    let runs = 0;
    let served = 0;
    for (let i = 0; i < STARTER_CALLS + 5; i++) {
      const r = await serveMetered(meter, starter, call(), async () => ++runs);
      if (r.ok) served++;
    }
    expect(served).toBe(STARTER_CALLS);
    expect(runs).toBe(STARTER_CALLS);
  });

  it('reports the live figures on a failed call, and does not debit it', async () => {
    const { meter, store, caller } = setup();
    const pro = caller('pro');
    await serveMetered(meter, pro, call(), async () => 'ok');
    const failed = await serveMetered(meter, pro, call(), async () => {
      throw new Error('venue down');
    });
    expect(failed).toMatchObject({ ok: false, reason: 'failed', service: { quota: { used: 1 } } });
    expect((await store.readAll()).reduce((sum, e) => sum + debitedUnits(e), 0)).toBe(1);
  });
});
