import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { type EventStore, StorageFullError } from '../../adapters/event-store/port.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import { newEvent, parseDomainEvent, QuotaDebitsRecorded } from '../../contracts/events.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import { QUOTA_FAMILY } from './quota-rebuild.ts';
import { type QuotaSubject, quotaPeriod, quotaWindows } from './windows.ts';

const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 60 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);
const meters: QuotaMeter[] = [];
afterEach(async () => {
  await Promise.all(meters.splice(0).map((m) => m.counters.stop()));
});

function meterOn(store: EventStore, cache = new MemoryCache()) {
  const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => T0 });
  meters.push(meter);
  return { meter, cache };
}
const key = (plan: QuotaSubject['plan'] = 'pro'): QuotaSubject => ({
  id: `k-${randomUUID()}`,
  kind: 'key',
  plan,
});
const counters = (cache: MemoryCache, subject: QuotaSubject) =>
  cache.readLive(
    QUOTA_FAMILY,
    quotaWindows(subject.id, PLANS[subject.plan], quotaPeriod(T0)).map((w) => w.key),
  );

/** A store whose appends to quota streams wait for `gate` (a slow disk), counting them. */
function gatedStore(memory: MemoryEventStore) {
  const state = { appends: 0, gate: Promise.resolve() };
  const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
    append: async (stream: string, events: NewEvent[], options?: never) => {
      if (stream.startsWith('quota-')) {
        state.appends++;
        await state.gate;
      }
      return memory.append(stream, events, options);
    },
  });
  return { store, state };
}

describe('each debit not served from a lease is recorded on its own', () => {
  it('100 concurrent calls of one key: an event of one unit per call, each call debited once', async () => {
    const memory = new MemoryEventStore();
    const { meter, cache } = meterOn(memory);
    const subject = key();
    const outcomes = await Promise.all(
      Array.from({ length: 100 }, (_, i) => meter.debit(subject, i % 3 ? 'get_trade_call' : 'get_regime')),
    );
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const debits = (await memory.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(debits.map((e) => debitedUnits(e, subject.id))).toEqual(Array(100).fill(1));
    // Every event is a valid QuotaDebitsRecorded of one tool; per tool the units are its calls.
    const perTool = new Map<string, number>();
    for (const e of debits) {
      const parsed = parseDomainEvent(e);
      expect(parsed?.type).toBe('QuotaDebitsRecorded');
      if (parsed?.type !== 'QuotaDebitsRecorded') continue;
      // Built without zod, the data is what zod would give, field order included.
      expect(JSON.stringify(e.data)).toBe(JSON.stringify(QuotaDebitsRecorded.parse(e.data)));
      perTool.set(parsed.data.tool, (perTool.get(parsed.data.tool) ?? 0) + parsed.data.units);
    }
    expect(Object.fromEntries(perTool)).toEqual({ get_trade_call: 66, get_regime: 34 });
    expect(await counters(cache, subject)).toEqual([100, 100]);
  });

  it('no call is answered before its debit is on the log', async () => {
    const memory = new MemoryEventStore();
    const { store, state } = gatedStore(memory);
    const { meter } = meterOn(store);
    const subject = key();
    await meter.debit(subject, 't'); // the counters' first build, out of the way
    let open!: () => void;
    state.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let served = 0;
    const calls = Array.from({ length: 20 }, () => meter.debit(subject, 't').then(() => served++));
    while (state.appends < 21) await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(served).toBe(0);
    open();
    await Promise.all(calls);
    expect(served).toBe(20);
  });

  it('one call at a time: one event per call, as many as calls and never more', async () => {
    const memory = new MemoryEventStore();
    const { meter } = meterOn(memory);
    const subject = key();
    for (let i = 0; i < 5; i++) await meter.debit(subject, 't');
    const debits = (await memory.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(debits.map((e) => debitedUnits(e))).toEqual([1, 1, 1, 1, 1]);
    // The meter names each record itself (newEventId): time-ordered, so the stores' id indexes
    // take them at their right edge, in the order they were written.
    const ids = debits.map((e) => e.id);
    for (const id of ids) expect(id.charAt(14)).toBe('7');
    expect([...ids].sort()).toEqual(ids);
  });

  it('each event names its own subject, on its stream', async () => {
    const memory = new MemoryEventStore();
    const { meter } = meterOn(memory);
    const a = key();
    const b = key('free');
    await Promise.all(Array.from({ length: 30 }, (_, i) => meter.debit(i % 2 ? a : b, 't')));
    const events = await memory.readAll();
    expect(events.reduce((sum, e) => sum + debitedUnits(e, a.id), 0)).toBe(15);
    expect(events.reduce((sum, e) => sum + debitedUnits(e, b.id), 0)).toBe(15);
    for (const e of events.filter((x) => debitedUnits(x) > 0))
      expect(e.stream).toBe(`quota-${(e.data as { subject: string }).subject}`);
  });

  it('the records of calls counted in one turn reach the store in one tick, for it to send together', async () => {
    const memory = new MemoryEventStore();
    // Which tick each quota append arrived in: a tick ends when the queue of nextTicks runs.
    const ticks: number[] = [];
    let tick = 0;
    let ending = false;
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      append: (stream: string, events: NewEvent[], options?: never) => {
        if (stream.startsWith('quota-')) {
          ticks.push(tick);
          if (!ending) {
            ending = true;
            process.nextTick(() => {
              tick++;
              ending = false;
            });
          }
        }
        return memory.append(stream, events, options);
      },
    });
    const { meter } = meterOn(store);
    const subjects = Array.from({ length: 8 }, () => key());
    await Promise.all(subjects.map((s) => meter.debit(s, 't')));
    expect(ticks).toHaveLength(8);
    expect(new Set(ticks).size).toBe(1);
  });

  it('a full disk: the calls whose record was not written are refused and give back exactly their units', async () => {
    const memory = new MemoryEventStore();
    let full = false;
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      append: async (stream: string, events: NewEvent[], options?: never) => {
        if (full && stream.startsWith('quota-')) throw new StorageFullError('disk full');
        return memory.append(stream, events, options);
      },
    });
    const { meter, cache } = meterOn(store);
    const subject = key('free');
    // 7 served and logged.
    const served = await Promise.all(Array.from({ length: 7 }, () => meter.debit(subject, 't')));
    expect(served.every((o) => o.ok)).toBe(true);
    full = true;
    const refused = await Promise.allSettled(Array.from({ length: 12 }, () => meter.debit(subject, 't')));
    expect(refused.every((r) => r.status === 'rejected' && r.reason instanceof StorageFullError)).toBe(true);
    // Only the 7 written calls count: the 12 refused gave their units back.
    expect(await counters(cache, subject)).toEqual([7, 7]);
    full = false;
    expect((await meter.debit(subject, 't')).snapshot).toMatchObject({ used: 8 });
    expect((await memory.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0)).toBe(8);
  });

  it('a record that landed though its append failed serves its call, however many of the key were committed after it', async () => {
    const memory = new MemoryEventStore();
    const subject = key();
    const stream = `quota-${subject.id}`;
    // The first quota append lands, then 100 more of the key's records land after it, then its
    // answer is lost: the record sits 100 events from the stream's end.
    let lost = false;
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      append: async (name: string, events: NewEvent[], options?: never) => {
        const written = await memory.append(name, events, options);
        if (name === stream && !lost) {
          lost = true;
          for (let i = 0; i < 100; i++) await memory.append(stream, [{ ...events[0]!, id: randomUUID() }]);
          throw new Error('connection reset: the commit answer was lost');
        }
        return written;
      },
    });
    const { meter, cache } = meterOn(store);
    const outcome = await meter.debit(subject, 't');
    expect(outcome.ok).toBe(true);
    // Charged once on the counters, as on the log: nothing given back.
    expect(await counters(cache, subject)).toEqual([1, 1]);
  });

  it('the counters fold logs holding both QuotaDebited (older logs) and QuotaDebitsRecorded', async () => {
    const memory = new MemoryEventStore();
    const subject = key();
    const { day, month } = quotaPeriod(T0);
    for (let i = 0; i < 3; i++)
      await memory.append(`quota-${subject.id}`, [
        newEvent('QuotaDebited', {
          subject: subject.id,
          subjectKind: 'key',
          plan: 'pro',
          tool: 't',
          units: 1,
          day,
          month,
          requestId: `old-${i}`,
        }),
      ]);
    const first = meterOn(memory);
    await Promise.all(Array.from({ length: 9 }, () => first.meter.debit(subject, 't')));
    // A restart: a new in-process cache, rebuilt from the log.
    const { meter, cache } = meterOn(memory);
    expect(await meter.peek(subject)).toMatchObject({ used: 12 });
    expect(await counters(cache, subject)).toEqual([12, 12]);
  });
});
