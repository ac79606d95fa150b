import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { Caller } from './caller.ts';
import { HEADROOM_MARGIN, serveMetered } from './metered-call.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';

/** The real in-process cache, counting the reads of live counters (a peek is one read). */
class CountingCache extends MemoryCache {
  reads = 0;
  override readLive(...args: Parameters<MemoryCache['readLive']>) {
    this.reads++;
    return super.readLive(...args);
  }
}

const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 5 },
  starter: { monthly: HEADROOM_MARGIN + 3, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};

const meters: QuotaMeter[] = [];
afterEach(async () => {
  for (const m of meters.splice(0)) await m.counters.stop();
});

function setup() {
  const cache = new CountingCache();
  const store = new MemoryEventStore();
  const meter = new QuotaMeter({ cache, store, plans: PLANS });
  meters.push(meter);
  const caller = (plan: 'free' | 'starter' | 'pro'): Caller => ({
    auth: { outcome: 'OK', presented: true, tier: plan },
    subject: { id: `k-${randomUUID()}`, kind: 'key', plan },
    keyId: 'key_test',
  });
  return { cache, store, meter, caller };
}

const call = () => ({ tool: 'get_trade_call', requestId: randomUUID() });

describe('serveMetered', () => {
  it('skips the read before the run while a recent debit left a wide margin, and still debits every call', async () => {
    const { cache, store, meter, caller } = setup();
    const pro = caller('pro');
    await serveMetered(meter, pro, call(), async () => 'first');
    const readsAfterFirst = cache.reads;
    for (let i = 0; i < 10; i++) {
      const served = await serveMetered(meter, pro, call(), async () => i);
      expect(served).toMatchObject({ ok: true, value: i, service: { quota: { used: i + 2 } } });
    }
    expect(cache.reads).toBe(readsAfterFirst);
    // One call at a time: nothing to batch, one debit event per call.
    const debits = (await store.readAll()).map((e) => debitedUnits(e)).filter((units) => units > 0);
    expect(debits).toEqual(Array(11).fill(1));
  });

  it('reads before every run near the limit, and refuses an exhausted caller without running', async () => {
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

  it('starts reading again once the margin is used up, so the last calls are refused before running', async () => {
    const { meter, caller } = setup();
    const starter = caller('starter');
    let runs = 0;
    let served = 0;
    for (let i = 0; i < HEADROOM_MARGIN + 5; i++) {
      const r = await serveMetered(meter, starter, call(), async () => ++runs);
      if (r.ok) served++;
    }
    expect(served).toBe(HEADROOM_MARGIN + 3);
    // Once fewer than the margin were left every call read first: the two refused never ran.
    expect(runs).toBe(HEADROOM_MARGIN + 3);
  });

  it('reports the live figures on a failed call whose read was skipped, and does not debit it', async () => {
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
