import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { type EventStore, StorageFullError } from '../../adapters/event-store/port.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import { newEvent, parseDomainEvent, QuotaDebitsRecorded } from '../../contracts/events.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter, type QuotaSubject } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import { QUOTA_FAMILY } from './quota-rebuild.ts';
import { quotaPeriod, quotaWindows } from './windows.ts';

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

describe('debits of concurrent calls are recorded per subject in batches', () => {
  it('100 concurrent calls of one key: fewer events than calls, their units sum to 100, each call debited once', async () => {
    const memory = new MemoryEventStore();
    const { meter, cache } = meterOn(memory);
    const subject = key();
    const outcomes = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        meter.debit(subject, i % 3 ? 'get_trade_call' : 'get_regime', `r${i}`),
      ),
    );
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const debits = (await memory.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(debits.length).toBeLessThan(100);
    expect(debits.reduce((sum, e) => sum + debitedUnits(e, subject.id), 0)).toBe(100);
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

  it('a subject has at most two debit appends in flight: calls counted meanwhile go out together in the next one', async () => {
    const memory = new MemoryEventStore();
    const { store, state } = gatedStore(memory);
    const { meter } = meterOn(store);
    const subject = key();
    await meter.debit(subject, 't', 'warm-up'); // the counters' first build, out of the way
    let open!: () => void;
    state.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const first = meter.debit(subject, 't', 'first');
    while (state.appends === 1) await new Promise((resolve) => setImmediate(resolve));
    // Until the appends land, 20 more calls arrive over several turns of the event loop: the
    // first of them starts a second append at once (a call does not wait for the first one's
    // flush and then its own), the rest wait for one of the two to land.
    const later: Promise<unknown>[] = [];
    for (let i = 0; i < 20; i++) {
      later.push(meter.debit(subject, 't', `later-${i}`));
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(state.appends).toBe(3);
    let served = 0;
    for (const p of later) void p.then(() => served++);
    await new Promise((resolve) => setImmediate(resolve));
    // None of them is answered before its debit is on the log.
    expect(served).toBe(0);
    open();
    await Promise.all([first, ...later]);
    expect(state.appends).toBe(4);
    const units = (await memory.readAll()).map((e) => debitedUnits(e, subject.id)).filter((u) => u > 0);
    // The second append took what was counted by the end of its turn; the third the rest.
    expect(units).toHaveLength(4);
    expect(units.slice(0, 2)).toEqual([1, 1]);
    expect(units[2]! + units[3]!).toBe(20);
    expect(units[3]).toBeGreaterThan(units[2]!);
  });

  it('one call at a time: one event per call, as many as calls and never more', async () => {
    const memory = new MemoryEventStore();
    const { meter } = meterOn(memory);
    const subject = key();
    for (let i = 0; i < 5; i++) await meter.debit(subject, 't', `r${i}`);
    const debits = (await memory.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(debits.map((e) => debitedUnits(e))).toEqual([1, 1, 1, 1, 1]);
    // The meter names each record itself (newEventId): time-ordered, so the stores' id indexes
    // take them at their right edge, in the order they were written.
    const ids = debits.map((e) => e.id);
    for (const id of ids) expect(id.charAt(14)).toBe('7');
    expect([...ids].sort()).toEqual(ids);
  });

  it('subjects are batched apart, each event naming its own subject', async () => {
    const memory = new MemoryEventStore();
    const { meter } = meterOn(memory);
    const a = key();
    const b = key('free');
    await Promise.all(Array.from({ length: 30 }, (_, i) => meter.debit(i % 2 ? a : b, 't', `r${i}`)));
    const events = await memory.readAll();
    expect(events.reduce((sum, e) => sum + debitedUnits(e, a.id), 0)).toBe(15);
    expect(events.reduce((sum, e) => sum + debitedUnits(e, b.id), 0)).toBe(15);
    for (const e of events.filter((x) => debitedUnits(x) > 0))
      expect(e.stream).toBe(`quota-${(e.data as { subject: string }).subject}`);
  });

  it('the batches of subjects counted in one turn reach the store in one tick, for it to send together', async () => {
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
    await Promise.all(subjects.map((s, i) => meter.debit(s, 't', `r${i}`)));
    expect(ticks).toHaveLength(8);
    expect(new Set(ticks).size).toBe(1);
  });

  it('a full disk: the calls of a batch that was not written are refused and give back exactly their units', async () => {
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
    const served = await Promise.all(
      Array.from({ length: 7 }, (_, i) => meter.debit(subject, 't', `ok-${i}`)),
    );
    expect(served.every((o) => o.ok)).toBe(true);
    full = true;
    const refused = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => meter.debit(subject, 't', `full-${i}`)),
    );
    expect(refused.every((r) => r.status === 'rejected' && r.reason instanceof StorageFullError)).toBe(true);
    // Only the 7 written calls count: the 12 refused gave their units back.
    expect(await counters(cache, subject)).toEqual([7, 7]);
    full = false;
    expect((await meter.debit(subject, 't', 'after')).snapshot).toMatchObject({ used: 8 });
    expect((await memory.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0)).toBe(8);
  });

  it('a full disk while the previous batch is in flight: only the refused batch is given back', async () => {
    const memory = new MemoryEventStore();
    const { store, state } = gatedStore(memory);
    // The first debit append is written (once the gate opens); the second finds the disk full.
    const failing: EventStore = Object.assign(Object.create(store) as EventStore, {
      append: async (stream: string, events: NewEvent[], options?: never) => {
        if (stream.startsWith('quota-') && state.appends === 1) {
          state.appends++;
          throw new StorageFullError('disk full');
        }
        return store.append(stream, events, options);
      },
    });
    const { meter, cache } = meterOn(failing);
    const subject = key();
    let open!: () => void;
    state.gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const first = Promise.all(Array.from({ length: 4 }, (_, i) => meter.debit(subject, 't', `a${i}`)));
    while (state.appends === 0) await new Promise((resolve) => setImmediate(resolve));
    const second = Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => meter.debit(subject, 't', `b${i}`)),
    );
    await new Promise((resolve) => setImmediate(resolve));
    open();
    expect((await first).every((o) => o.ok)).toBe(true);
    const refused = await second;
    expect(refused.every((r) => r.status === 'rejected' && r.reason instanceof StorageFullError)).toBe(true);
    expect(state.appends).toBe(2);
    expect((await memory.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0)).toBe(4);
    expect(await counters(cache, subject)).toEqual([4, 4]);
  });

  it('the counters fold logs holding both per-call QuotaDebited and batched QuotaDebitsRecorded', async () => {
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
    await Promise.all(Array.from({ length: 9 }, (_, i) => first.meter.debit(subject, 't', `new-${i}`)));
    // A restart: a new in-process cache, rebuilt from the log.
    const { meter, cache } = meterOn(memory);
    expect(await meter.peek(subject)).toMatchObject({ used: 12 });
    expect(await counters(cache, subject)).toEqual([12, 12]);
  });
});
