import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { behindHead, eventsBehind, projectionLag } from './lag.ts';

/**
 * The memory store with KurrentDB's kind of positions: byte offsets in a log, here a fixed stride
 * per event. KurrentDB cannot run on this machine (no server, no container engine); its adapter's
 * positions are prepare positions (adapters/event-store/kurrentdb.ts), which is all this needs.
 */
function byteOffsets(store: MemoryEventStore, stride: number): EventStore & { reads: number } {
  const scaled = (e: RecordedEvent) => ({ ...e, position: e.position * stride });
  const wrapped = Object.assign(Object.create(store) as EventStore, {
    densePositions: false,
    reads: 0,
    readAll: async (options: Parameters<EventStore['readAll']>[0] = {}) => {
      wrapped.reads++;
      return (
        await store.readAll({
          after: Math.floor((options.after ?? 0) / stride),
          ...(options.maxCount === undefined ? {} : { maxCount: options.maxCount }),
        })
      ).map(scaled);
    },
    headPosition: async () => (await store.headPosition()) * stride,
  });
  return wrapped;
}

async function tenEvents(): Promise<MemoryEventStore> {
  const store = new MemoryEventStore();
  for (let i = 0; i < 10; i++) await store.append(`s-${i}`, [{ type: 'Noted', data: { i } }]);
  return store;
}

describe('eventsBehind', () => {
  it('is the difference of positions where they are consecutive', async () => {
    const store = await tenEvents();
    expect(store.densePositions).toBe(true);
    expect(await eventsBehind(store, 3, 10, 100)).toBe(7);
    expect(await eventsBehind(store, 10, 10, 100)).toBe(0);
    // A checkpoint past the head (a store restored from an older backup) is not negative lag.
    expect(await eventsBehind(store, 12, 10, 100)).toBe(0);
  });

  it('counts events, not bytes, where positions are byte offsets, up to cap + 1', async () => {
    const base = await tenEvents();
    const store = byteOffsets(base, 4_096);
    const head = await store.headPosition();
    const third = (await store.readAll({ maxCount: 3 })).at(-1)!.position;
    expect(head - third).toBe(7 * 4_096);
    expect(await eventsBehind(store, third, head, 100)).toBe(7);
    expect(await eventsBehind(store, 0, head, 100)).toBe(10);
    // Far behind: only "more than the cap" is read, not the whole log.
    expect(await eventsBehind(store, 0, head, 4)).toBe(5);
    expect(await eventsBehind(store, head, head, 4)).toBe(0);
    // Appended after the head was read: not behind that head.
    await base.append('s-late', [{ type: 'Noted', data: { i: 10 } }]);
    expect(await eventsBehind(store, third, head, 100)).toBe(7);
  });

  it('counts each checkpoint once against one head (behindHead)', async () => {
    const store = byteOffsets(await tenEvents(), 4_096);
    const head = await store.headPosition();
    const count = behindHead(store, head, 100);
    const [a, b, c] = await Promise.all([count(4_096), count(4_096), count(8 * 4_096)]);
    expect([a, b, c]).toEqual([9, 9, 2]);
    expect(store.reads).toBe(2);
  });
});

describe('projectionLag', () => {
  it('names no head where no projection runs in this process, instead of a head of 0', async () => {
    const store = await tenEvents();
    const report = await projectionLag(store, 100);
    expect(report).toEqual({
      ok: true,
      detail: 'no projection runs in this process',
      maxLag: 100,
      behind: {},
    });
    expect(report).not.toHaveProperty('head');
  });
});
