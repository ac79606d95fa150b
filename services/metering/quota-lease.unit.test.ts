import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import { parseDomainEvent, QuotaDebitsReturned } from '../../contracts/events.ts';
import type { PlanTable } from './plans.ts';
import { type DebitOutcome, type LeaseOptions, QuotaMeter } from './quota-meter.ts';
import { debitedUnits, quotaBalancesProjection } from './quota-projection.ts';
import { QUOTA_FAMILY, rebuildQuotaGeneration } from './quota-rebuild.ts';
import { type QuotaSubject, quotaPeriod, quotaWindows, subjectWindows } from './windows.ts';

const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 60 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);
const LEASE: LeaseOptions = { ms: 1_000, maxUnits: 64, idleMs: 15 };
const meters: QuotaMeter[] = [];
afterEach(async () => {
  await Promise.all(meters.splice(0).map(async (m) => Promise.all([m.stop(), m.counters.stop()])));
});

const key = (plan: QuotaSubject['plan'] = 'pro'): QuotaSubject => ({
  id: `k-${randomUUID()}`,
  kind: 'key',
  plan,
});

/**
 * A store that counts the net units committed per subject: raised only once an append is
 * committed, before its caller hears of it, so a call answered with fewer units committed than
 * calls answered shows at once.
 */
function tallyingStore(memory = new MemoryEventStore()) {
  const committed = new Map<string, number>();
  const state = {
    failQuotaAppends: false,
    /** Appends of returns that fail before one goes through. */
    failReturns: 0,
    /** Returns wait for this (a slow append), and say so in `returnWaiting`. */
    returnGate: Promise.resolve(),
    returnWaiting: false,
  };
  const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
    append: async (stream: string, events: NewEvent[], options?: never) => {
      if (stream.startsWith('quota-') && state.failQuotaAppends) throw new Error('disk on fire');
      if (events.some((e) => e.type === 'QuotaDebitsReturned')) {
        state.returnWaiting = true;
        await state.returnGate;
        if (state.failReturns > 0) {
          state.failReturns--;
          throw new Error('disk on fire, for a moment');
        }
      }
      const result = await memory.append(stream, events, options);
      for (const event of events) {
        const data = event.data as { subject?: string; units?: number };
        if (data.subject === undefined || data.units === undefined) continue;
        const sign = event.type === 'QuotaDebitsReturned' ? -1 : event.type.startsWith('QuotaDebit') ? 1 : 0;
        committed.set(data.subject, (committed.get(data.subject) ?? 0) + sign * data.units);
      }
      return result;
    },
  });
  return { store, memory, committed, state };
}

function meterOn(
  store: EventStore,
  options: { cache?: MemoryCache; plans?: PlanTable; now?: () => number; lease?: LeaseOptions } = {},
) {
  const cache = options.cache ?? new MemoryCache();
  const meter = new QuotaMeter({
    cache,
    store,
    plans: options.plans ?? PLANS,
    now: options.now ?? (() => T0),
    lease: options.lease ?? LEASE,
  });
  meters.push(meter);
  return { meter, cache };
}

/**
 * A cache whose refunds on the live counters wait until `refund()` is called, as on a slow cache;
 * `memory` is the cache underneath, whose counters the test reads.
 */
function heldRefunds() {
  let refund = () => {};
  const gate = new Promise<void>((resolve) => {
    refund = resolve;
  });
  const memory = new MemoryCache();
  const cache = Object.assign(Object.create(memory) as MemoryCache, {
    refundLive: async (...args: Parameters<MemoryCache['refundLive']>) => {
      await gate;
      return memory.refundLive(...args);
    },
  });
  return { memory, cache, refund };
}

const counters = (cache: MemoryCache, subject: QuotaSubject, at = T0) =>
  cache.readLive(
    QUOTA_FAMILY,
    quotaWindows(subject.id, PLANS[subject.plan], quotaPeriod(at)).map((w) => w.key),
  );

const netUnits = async (memory: MemoryEventStore, subject: QuotaSubject) =>
  (await memory.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0);

/** The net units on the log for the subject, by the day they were debited to. */
async function unitsByDay(memory: MemoryEventStore, subject: QuotaSubject): Promise<Record<string, number>> {
  const days: Record<string, number> = {};
  for (const e of await memory.readAll()) {
    const units = debitedUnits(e, subject.id);
    if (units === 0) continue;
    const day = (e.data as { day: string }).day;
    days[day] = (days[day] ?? 0) + units;
  }
  return days;
}

/**
 * `workers` loops of `each` calls of one subject, one call at a time each, all at once: a busy
 * key's traffic, calls arriving while the last ones' debits are on their way. Checks at every
 * answer that the subject's committed units cover every call answered so far, and exceed them by
 * no more than one lease and the calls in flight.
 */
async function busy(
  meter: QuotaMeter,
  subject: QuotaSubject,
  committed: Map<string, number>,
  workers: number,
  each: number,
  tools = ['get_trade_call'],
): Promise<DebitOutcome[]> {
  const outcomes: DebitOutcome[] = [];
  let answered = 0;
  let uncovered = 0;
  let overheld = 0;
  // Units on the log before these calls (earlier calls', and what a lease still holds of them).
  const before = committed.get(subject.id) ?? 0;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0; i < each; i++) {
        const outcome = await meter.debit(subject, tools[w % tools.length]!);
        if (outcome.ok) answered++;
        const logged = committed.get(subject.id) ?? 0;
        if (logged < answered) uncovered++;
        if (logged - before - answered > LEASE.maxUnits! + workers) overheld++;
        outcomes.push(outcome);
      }
    }),
  );
  expect(uncovered).toBe(0);
  expect(overheld).toBe(0);
  return outcomes;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('leases: a busy subject prepays its next calls in one event', () => {
  it('500 calls of 20 callers at once: far fewer events than calls, no call answered before its unit was committed, and after stop the log and the counters hold exactly the calls', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key();
    const outcomes = await busy(meter, subject, committed, 20, 25);
    expect(outcomes.every((o) => o.ok)).toBe(true);

    const events = (await memory.readAll()).filter((e) => debitedUnits(e, subject.id) !== 0);
    // Without a lease, an event per call; with it, the calls before and between grants alone.
    expect(events.length).toBeLessThan(100);
    // Held but not yet taken: at most one lease's worth, on the log; the counters may hold a
    // reservation on its way to the log besides, within the same bound.
    const held = (await netUnits(memory, subject)) - 500;
    expect(held).toBeGreaterThanOrEqual(0);
    expect(held).toBeLessThanOrEqual(LEASE.maxUnits!);
    const [counted] = await counters(cache, subject);
    expect(counted).toBeGreaterThanOrEqual(500 + held);
    expect(counted).toBeLessThanOrEqual(500 + LEASE.maxUnits!);
    // What a call is told it used leaves out what the lease holds: the last answers say 500, and
    // so does a read of the figures.
    expect(Math.max(...outcomes.map((o) => o.snapshot.used))).toBe(500);
    expect((await meter.peek(subject)).used).toBe(500);

    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(500);
    expect(await counters(cache, subject)).toEqual([500, 500]);
    const returns = (await memory.readAll()).filter((e) => e.type === 'QuotaDebitsReturned');
    expect(returns.map((e) => (e.data as { units: number }).units)).toEqual(held > 0 ? [held] : []);
    for (const e of returns) {
      expect(parseDomainEvent(e)?.type).toBe('QuotaDebitsReturned');
      expect(JSON.stringify(e.data)).toBe(JSON.stringify(QuotaDebitsReturned.parse(e.data)));
    }
    // The projection the counters are rebuilt from folds the return as units taken back.
    let state = quotaBalancesProjection.initial();
    for (const e of await memory.readAll())
      if ((quotaBalancesProjection.eventTypes as readonly string[]).includes(e.type))
        state = quotaBalancesProjection.evolve(state, e as never);
    const month = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0))[0]!.key;
    expect(state[month]?.count).toBe(500);
  });

  it('a lease no call takes from is given back within two idle periods, on the counters and on the log', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key();
    await busy(meter, subject, committed, 10, 25);
    await expect.poll(() => netUnits(memory, subject), { interval: LEASE.idleMs! }).toBe(250);
    expect(await counters(cache, subject)).toEqual([250, 250]);
  });

  it('a lease lives through a sweep that follows a call and ends at the next sweep without one: one to two idle periods', async () => {
    // Only the sweeps' interval is driven by hand; every other timer and the meter's clock run.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const { store, memory, committed } = tallyingStore();
      const { meter, cache } = meterOn(store);
      const subject = key();
      await busy(meter, subject, committed, 10, 25);
      await sleep(20); // the last grant in flight, if any, lands
      expect(await netUnits(memory, subject)).toBeGreaterThan(250);
      /** A call, and whether the lease served it or it was debited alone (its one-unit record on the log before its answer). */
      const leased = async () => {
        const before = (await memory.readAll()).length;
        const outcome = await meter.debit(subject, 'get_trade_call');
        expect(outcome.ok).toBe(true);
        const added = (await memory.readAll()).slice(before);
        return !added.some((e) => e.type === 'QuotaDebitsRecorded' && debitedUnits(e, subject.id) === 1);
      };
      // One sweep after the last call: the lease is only marked idle.
      vi.advanceTimersByTime(LEASE.idleMs!);
      expect(await leased()).toBe(true);
      // A sweep after a call marks it idle again, no more.
      vi.advanceTimersByTime(LEASE.idleMs!);
      expect(await leased()).toBe(true);
      // Two sweeps without a call: the second ends it and its units go back.
      vi.advanceTimersByTime(LEASE.idleMs!);
      vi.advanceTimersByTime(LEASE.idleMs!);
      await expect.poll(() => netUnits(memory, subject), { interval: 5 }).toBe(252);
      expect(await counters(cache, subject)).toEqual([252, 252]);
      await meter.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('a caller too slow to fill a lease (5 calls a second) never gets one: one event per call, nothing to give back', async () => {
    const { store, memory } = tallyingStore();
    let now = T0;
    const { meter } = meterOn(store, { now: () => now });
    const subject = key();
    for (let i = 0; i < 40; i++) {
      expect((await meter.debit(subject, 'get_trade_call')).ok).toBe(true);
      now += 200;
    }
    const events = (await memory.readAll()).filter((e) => debitedUnits(e, subject.id) !== 0);
    expect(events.map((e) => debitedUnits(e))).toEqual(Array.from({ length: 40 }, () => 1));
  });

  it('the line is 8 calls within QUOTA_LEASE_MS: 8 calls over 980 ms are leased, 8 over 1,050 ms never', async () => {
    for (const [step, leased] of [
      [140, true],
      [150, false],
    ] as const) {
      const { store, memory } = tallyingStore();
      let now = T0;
      // An idle sweep far longer than the test: only the rate decides.
      const { meter } = meterOn(store, { now: () => now, lease: { ...LEASE, idleMs: 10_000 } });
      const subject = key();
      for (let i = 0; i < 40; i++) {
        expect((await meter.debit(subject, 'get_trade_call')).ok).toBe(true);
        now += step;
        await sleep(1);
      }
      const units = (await memory.readAll()).map((e) => debitedUnits(e, subject.id)).filter((u) => u !== 0);
      expect({ step, leased: units.some((u) => u > 1) }).toEqual({ step, leased });
    }
  });

  it('a caller at 100 calls a second whose calls never overlap (each answered before the next comes) is leased: the rate decides, not overlap', async () => {
    const { store, memory, committed } = tallyingStore();
    let now = T0;
    // An idle sweep of a second (this file's is 15 ms of real time, against the meter's clock
    // stepped 10 ms a call below): a pause of the test runner does not end the lease.
    const { meter, cache } = meterOn(store, { now: () => now, lease: { ...LEASE, idleMs: 1_000 } });
    const subject = key();
    for (let i = 0; i < 200; i++) {
      expect((await meter.debit(subject, 'get_trade_call')).ok).toBe(true);
      // Never fewer units on the log than calls answered.
      expect(committed.get(subject.id)).toBeGreaterThanOrEqual(i + 1);
      now += 10;
      // The next call comes after the last one's append has wholly finished.
      await sleep(1);
    }
    const events = (await memory.readAll()).filter((e) => debitedUnits(e, subject.id) !== 0);
    // One event per call would be 200; the first calls go one by one until the rate is known.
    expect(events.length).toBeLessThan(40);
    expect(events.some((e) => debitedUnits(e) > 1)).toBe(true);
    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(200);
    expect(await counters(cache, subject, now)).toEqual([200, 200]);
  });

  it('near a limit there is no lease: the free plan (60 a day) serves exactly 60 of 150 concurrent calls, all on the log', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key('free');
    const outcomes = await busy(meter, subject, committed, 6, 25);
    expect(outcomes.filter((o) => o.ok)).toHaveLength(60);
    expect(outcomes.filter((o) => !o.ok).every((o) => o.refusedBy === 'daily')).toBe(true);
    expect(await netUnits(memory, subject)).toBe(60);
    expect((await memory.readAll()).some((e) => e.type === 'QuotaDebitsReturned')).toBe(false);
    expect(await counters(cache, subject)).toEqual([60, 60]);
  });

  it('reservations whose append fails are given back on the counters and in the answers; the calls go on one debit each and fail as they would', async () => {
    const { store, memory, committed, state } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key();
    await busy(meter, subject, committed, 4, 25);
    state.failQuotaAppends = true;
    // Whatever the lease still holds is served; past it, the calls fail (nothing is served unrecorded).
    // One at a time: the calls after the failed reservation are served from what the lease holds.
    const during: PromiseSettledResult<DebitOutcome>[] = [];
    for (let i = 0; i < 200; i++) {
      const [settled] = await Promise.allSettled([meter.debit(subject, 'get_trade_call')]);
      during.push(settled!);
    }
    const answered = during.flatMap((r) => (r.status === 'fulfilled' && r.value.ok ? [r.value] : []));
    const served = 100 + answered.length;
    expect(during.some((r) => r.status === 'rejected')).toBe(true);
    // The calls served from what the lease still held say what was used: never the units of the
    // reservation that failed (given back on the counters, they were once still in the answers).
    expect(answered.length).toBeGreaterThan(0);
    expect(Math.max(...answered.map((o) => o.snapshot.used))).toBeLessThanOrEqual(served);
    state.failQuotaAppends = false;
    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(served);
    expect(await counters(cache, subject)).toEqual([served, served]);
  });

  it('the counters out of reach when a lease ends: the return is tried again an idle period later', async () => {
    const { store, memory, committed } = tallyingStore();
    const cache = new MemoryCache();
    let refusals = 2;
    const real = cache.refundLive.bind(cache);
    cache.refundLive = async (...args: Parameters<MemoryCache['refundLive']>) => {
      if (refusals-- > 0) throw new CacheUnavailableError('cache down for the test');
      return real(...args);
    };
    const { meter } = meterOn(store, { cache });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    const held = (await netUnits(memory, subject)) - 200;
    expect(held).toBeGreaterThan(0);
    await expect.poll(() => netUnits(memory, subject)).toBe(200);
    expect(refusals).toBeLessThan(0);
    expect(await counters(cache, subject)).toEqual([200, 200]);
  });

  it('a return whose answer is lost after the counters took it (a timeout) is sent again and given back once', async () => {
    const { store, memory, committed } = tallyingStore();
    const cache = new MemoryCache();
    let lost = 2;
    const real = cache.refundLive.bind(cache);
    cache.refundLive = async (...args: Parameters<MemoryCache['refundLive']>) => {
      const generation = await real(...args);
      if (lost-- > 0) throw new CacheUnavailableError('answer lost for the test');
      return generation;
    };
    const { meter } = meterOn(store, { cache });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    expect(await netUnits(memory, subject)).toBeGreaterThan(200);
    await expect.poll(() => netUnits(memory, subject)).toBe(200);
    expect(lost).toBeLessThan(0);
    // Not below the log: each retry carried the first try's id.
    expect(await counters(cache, subject)).toEqual([200, 200]);
  });

  it('a return out of reach for all its tries is given up: its units stay charged, never sent again', async () => {
    const { store, memory, committed } = tallyingStore();
    const cache = new MemoryCache();
    let tries = 0;
    cache.refundLive = async () => {
      tries++;
      throw new CacheUnavailableError('down for the test');
    };
    const { meter } = meterOn(store, { cache });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    const charged = await netUnits(memory, subject);
    expect(charged).toBeGreaterThan(200);
    // The stop waits for the give-back, however it ends.
    await meter.stop();
    expect(tries).toBe(3);
    // No return on the log: what the lease held stays charged, as after a kill.
    expect(await netUnits(memory, subject)).toBe(charged);
  });

  it('a new day ends the day before its lease: its units go back to that day, the new day starts from nothing', async () => {
    const { store, memory, committed } = tallyingStore();
    let now = T0;
    const { meter, cache } = meterOn(store, { now: () => now });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    const nextDay = T0 + 24 * 3_600_000;
    now = nextDay;
    await busy(meter, subject, committed, 8, 25);
    await meter.stop();
    expect(await unitsByDay(memory, subject)).toEqual({
      [quotaPeriod(T0).day]: 200,
      [quotaPeriod(nextDay).day]: 200,
    });
    const [month] = await counters(cache, subject, nextDay);
    expect(month).toBe(400);
  });

  it("a call asked before midnight and debited after it leaves the new day's lease alone and is debited to its own day", async () => {
    const { store, memory, committed } = tallyingStore();
    const nextDay = T0 + 24 * 3_600_000;
    let now = nextDay;
    const { meter } = meterOn(store, { now: () => now });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    const returns = async () =>
      (await memory.readAll()).filter((e) => e.type === 'QuotaDebitsReturned').length;
    const before = await returns();
    // Windows made when the call was asked, the day before.
    const late = await meter.debit(subject, 'get_trade_call', subjectWindows(subject, PLANS, T0));
    expect(late.ok).toBe(true);
    now = nextDay + 1;
    await meter.debit(subject, 'get_trade_call');
    // Neither the late call nor the next one ended a lease: no units went back.
    expect(await returns()).toBe(before);
    await meter.stop();
    expect(await unitsByDay(memory, subject)).toEqual({
      [quotaPeriod(T0).day]: 1,
      [quotaPeriod(nextDay).day]: 201,
    });
  });

  it('a plan changed under a lease (starter to pro) ends it: the answers count the calls served against the new limit, the old units go back', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key('starter');
    await busy(meter, subject, committed, 8, 25);
    expect((await memory.readAll()).some((e) => debitedUnits(e, subject.id) > 1)).toBe(true);
    const upgraded: QuotaSubject = { ...subject, plan: 'pro' };
    const outcomes = await busy(meter, upgraded, committed, 8, 25);
    expect(outcomes.every((o) => o.ok && o.snapshot.total === PLANS.pro.monthly)).toBe(true);
    expect(Math.max(...outcomes.map((o) => o.snapshot.used))).toBeLessThanOrEqual(400);
    expect((await meter.peek(upgraded)).used).toBe(400);
    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(400);
    // Each plan's units net to its own calls: no pro call was served from the starter lease.
    const byPlan = new Map<string, number>();
    for (const e of await memory.readAll()) {
      const units = debitedUnits(e, subject.id);
      const plan = (e.data as { plan?: string }).plan;
      if (units !== 0 && plan !== undefined) byPlan.set(plan, (byPlan.get(plan) ?? 0) + units);
    }
    expect(Object.fromEntries(byPlan)).toEqual({ starter: 200, pro: 200 });
    expect(await counters(cache, upgraded)).toEqual([400, 400]);
  });

  it('a lease of the day before gives its units back to that day: the answers of the next are not lowered by them', async () => {
    const { store, committed } = tallyingStore();
    let now = T0;
    // A daily cap far from reach, so the day's figures are in the answers and leases are taken.
    const plans: PlanTable = { ...PLANS, pro: { monthly: 1_000_000, daily: 100_000 } };
    const { meter } = meterOn(store, { plans, now: () => now });
    const subject = key();
    // The first day's calls of two tools, served from the subject's one lease.
    await busy(meter, subject, committed, 8, 25, ['get_trade_call', 'get_market_regime']);
    now = T0 + 24 * 3_600_000;
    // The next day, called without a pause for several idle sweeps (the new day's lease lives on):
    // its first call ends the day before's lease, which gives its units back meanwhile.
    const daily: number[] = [];
    const until = Date.now() + LEASE.idleMs! * 8;
    for (let i = 0; Date.now() < until || i < 100; i++) {
      const outcome = await meter.debit(subject, 'get_trade_call');
      expect(outcome.ok).toBe(true);
      daily.push(outcome.snapshot.daily!.used);
      if (i % 10 === 9) await sleep(1);
    }
    expect(daily).toEqual(Array.from({ length: daily.length }, (_, i) => i + 1));
  });

  it("while the day before's lease gives its units back, the next day's answers count the month without them", async () => {
    const { store, committed } = tallyingStore();
    let now = T0;
    // The give-back's refund on the counters waits for refund(), as on a slow cache.
    const { memory, cache, refund } = heldRefunds();
    const { meter } = meterOn(store, { cache, now: () => now });
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    const [charged] = await counters(memory, subject);
    expect(charged).toBeGreaterThan(200);
    now = T0 + 24 * 3_600_000;
    // The new day's first call ends the day before's lease; its refund is held back meanwhile.
    const first = await meter.debit(subject, 'get_trade_call');
    expect(first.ok && first.snapshot.used).toBe(201);
    expect((await meter.peek(subject)).used).toBe(201);
    refund();
    await meter.stop();
    expect((await counters(memory, subject, now))[0]).toBe(201);
  });

  it("the day before's units given back come off the month the next day's lease answers with, never off its day", async () => {
    const { store, memory } = tallyingStore();
    let now = T0;
    // The day before's refund on the counters waits for refund(), until the next day's lease serves.
    const { cache, refund } = heldRefunds();
    // A daily cap far from reach, so the day's figures are in the answers; no idle end meanwhile.
    const plans: PlanTable = { ...PLANS, pro: { monthly: 1_000_000, daily: 100_000 } };
    const { meter } = meterOn(store, { cache, plans, now: () => now, lease: { ...LEASE, idleMs: 60_000 } });
    const subject = key();
    const call = async () => (await meter.debit(subject, 'get_trade_call')).snapshot;
    const poll = { interval: 1 };
    // Eight calls one by one: the eighth asks for a lease of 32 units (four per call seen).
    for (let i = 0; i < 8; i++) await call();
    await expect.poll(() => netUnits(memory, subject), poll).toBe(40);
    now = T0 + 24 * 3_600_000;
    // The next day's first call ends the day before's lease (its refund held back); its eighth
    // asks for the next day's own lease of 32.
    for (let i = 0; i < 8; i++) await call();
    await expect.poll(() => netUnits(memory, subject), poll).toBe(80);
    const events = (await memory.readAll()).length;
    expect(await call()).toMatchObject({ monthly: { used: 17 }, daily: { used: 9 } });
    refund();
    const returned = async () => (await memory.readAll()).some((e) => e.type === 'QuotaDebitsReturned');
    await expect.poll(returned, poll).toBe(true);
    expect(await call()).toMatchObject({ monthly: { used: 18 }, daily: { used: 10 } });
    // Both answered from the lease's counts: no record of their own.
    expect((await memory.readAll()).length).toBe(events + 1);
  });

  it("a new day's lease is not granted while the day before's grant is still being counted", async () => {
    const { store, memory, committed } = tallyingStore();
    let now = T0;
    const cache = new MemoryCache();
    const debitLive = cache.debitLive.bind(cache);
    // The next grant (a debit of more than one unit) waits on the counters until let go.
    let letGo = () => {};
    const held = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let holding = false;
    let grantsAsked = 0;
    cache.debitLive = async (...args: Parameters<MemoryCache['debitLive']>) => {
      if (args[2] > 1) {
        grantsAsked++;
        if (holding) await held;
      }
      return debitLive(...args);
    };
    const { meter } = meterOn(store, { cache, now: () => now });
    const subject = key();
    let served = (await busy(meter, subject, committed, 8, 25)).filter((o) => o.ok).length;
    holding = true;
    const asked = grantsAsked;
    // Calls until the lease asks for its next grant, which the counters hold.
    while (grantsAsked === asked) if ((await meter.debit(subject, 'get_trade_call')).ok) served++;
    // Midnight: the day before's lease ends with its grant in flight; the new day is busy at once.
    now = T0 + 24 * 3_600_000;
    for (let i = 0; i < 40; i++) {
      expect((await meter.debit(subject, 'get_trade_call')).ok).toBe(true);
      served++;
    }
    // No second grant was asked while the first was being counted.
    expect(grantsAsked).toBe(asked + 1);
    letGo();
    // A clean stop gives back every unit not served: the log nets to the calls served.
    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(served);
  });

  it('a rebuild of the counters from a log with leases and returns counts the calls served', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter } = meterOn(store);
    const subject = key();
    await busy(meter, subject, committed, 12, 25);
    await meter.stop();
    const fresh = new MemoryCache();
    const outcome = await rebuildQuotaGeneration({ store: memory, cache: fresh, settleMs: 0 });
    expect(outcome.switched).toBe(true);
    expect(await counters(fresh, subject)).toEqual([300, 300]);
  });

  it('a return counted in the generation a rebuild replaces and appended after its switch is replayed at once, not waited for', async () => {
    const { store, memory, committed, state } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key();
    await busy(meter, subject, committed, 12, 25);
    const held = (await netUnits(memory, subject)) - 300;
    expect(held).toBeGreaterThan(0);
    const previous = (await cache.liveGeneration(QUOTA_FAMILY))?.id;
    expect(previous).toBeDefined();
    // The return is given back on the live generation, and its record held back until the rebuild
    // has switched to a new one.
    let release = () => {};
    state.returnGate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const stopping = meter.stop();
    await expect.poll(() => state.returnWaiting, { interval: 5 }).toBe(true);
    const outcome = await rebuildQuotaGeneration({
      store: memory,
      cache,
      // A rebuild that waited for its settle deadline would outlive the test: it must end on the
      // replaced generation's count matching the log once the return lands.
      settleMs: 3_600_000,
      onLive: () => release(),
    });
    await stopping;
    expect(outcome.switched).toBe(true);
    expect(outcome.previous).toBe(previous);
    // The case under test: the return is on the log after the switch, tagged with the old generation.
    const returned = (await memory.readAll()).filter((e) => e.type === 'QuotaDebitsReturned');
    expect(returned).toHaveLength(1);
    expect(returned[0]!.position).toBeGreaterThan(outcome.position);
    expect((returned[0]!.data as { generation?: string }).generation).toBe(previous);
    expect(await netUnits(memory, subject)).toBe(300);
    expect(await counters(cache, subject)).toEqual([300, 300]);
  });

  it('a return whose record fails is appended again: the log nets to the calls served, once', async () => {
    const { store, memory, committed, state } = tallyingStore();
    const { meter, cache } = meterOn(store);
    const subject = key();
    await busy(meter, subject, committed, 8, 25);
    expect((await netUnits(memory, subject)) - 200).toBeGreaterThan(0);
    state.failReturns = 2;
    await expect.poll(() => netUnits(memory, subject), { interval: LEASE.idleMs! }).toBe(200);
    expect(state.failReturns).toBe(0);
    expect(await counters(cache, subject)).toEqual([200, 200]);
    await meter.stop();
    expect((await memory.readAll()).filter((e) => e.type === 'QuotaDebitsReturned')).toHaveLength(1);
  });

  it('two tools called at once share one lease: every answer counts the calls served, never what the lease holds', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter } = meterOn(store);
    const subject = key();
    const outcomes = await busy(meter, subject, committed, 20, 25, ['get_trade_call', 'get_market_regime']);
    // Every grant is recorded under the tool of the call that opened the one lease.
    const tools = new Set(
      (await memory.readAll())
        .filter((e) => e.type === 'QuotaDebitsRecorded' && debitedUnits(e, subject.id) > 20)
        .map((e) => (e.data as { tool: string }).tool),
    );
    expect(tools.size).toBe(1);
    // Each answer's figure is at most the calls served by then (500 in all), and the last say 500.
    expect(Math.max(...outcomes.map((o) => o.snapshot.used))).toBe(500);
    expect((await meter.peek(subject)).used).toBe(500);
    await meter.stop();
    expect(await netUnits(memory, subject)).toBe(500);
  });

  it('stopped, a meter takes no lease again: later calls are debited one by one', async () => {
    const { store, memory, committed } = tallyingStore();
    const { meter } = meterOn(store);
    const subject = key();
    await meter.stop();
    await busy(meter, subject, committed, 4, 25);
    expect((await memory.readAll()).some((e) => e.type === 'QuotaDebitsReturned')).toBe(false);
    expect(await netUnits(memory, subject)).toBe(100);
  });
});
