import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { newEvent } from '../contracts/events.ts';
import { feedOf } from './log-feed.ts';
import { defineProjection, foldEvents, type Projection } from './projection.ts';
import { ProjectionRunner } from './runner.ts';

const order: Projection<number[]> = {
  name: 'order',
  version: 1,
  initial: () => [],
  evolve(state, event) {
    state.push(event.position);
    return state;
  },
};

async function fill(store: MemoryEventStore, count: number) {
  for (let i = 0; i < count; i += 50)
    await store.append(
      `s-${i % 7}`,
      Array.from({ length: 50 }, (_, j) => ({ type: 'N', data: { n: i + j } })),
    );
}

describe('the shared log feed', () => {
  it('feeds a runner that joins behind the others every event once, in order, without disturbing them', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MemoryProjectionStore();
    await fill(store, 5_000);
    const ahead = new ProjectionRunner(store, snapshots, order);
    await ahead.start();
    await ahead.waitFor(5_000);
    await fill(store, 1_000);
    const behind = new ProjectionRunner(store, snapshots, { ...order, name: 'order-2' });
    await behind.start();
    await fill(store, 1_000);
    const head = await store.headPosition();
    await Promise.all([ahead.waitFor(head), behind.waitFor(head)]);
    const expected = Array.from({ length: head }, (_, i) => i + 1);
    expect(ahead.state).toEqual(expected);
    expect(behind.state).toEqual(expected);
    expect(feedOf(store).size).toBe(2);
    await ahead.stop();
    await behind.stop();
    expect(feedOf(store).size).toBe(0);
  });

  it('a projection whose fold throws leaves the feed; the others go on to the head', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MemoryProjectionStore();
    await fill(store, 3_000);
    const failing = new ProjectionRunner(store, snapshots, {
      ...order,
      name: 'failing',
      evolve(state, event) {
        if (event.position === 1_234) throw new Error('cannot fold 1234');
        return order.evolve(state, event);
      },
    });
    const healthy = new ProjectionRunner(store, snapshots, order);
    await failing.start();
    await healthy.start();
    await fill(store, 500);
    const head = await store.headPosition();
    await healthy.waitFor(head);
    expect(healthy.state).toEqual(foldEvents(order, await store.readAll()));
    expect(failing.error?.message).toBe('cannot fold 1234');
    expect(failing.checkpoint).toBe(1_233);
    await failing.stop();
    await healthy.stop();
  });

  it('validates each event once for every projection of the page: they fold the same parsed event', async () => {
    const store = new MemoryEventStore();
    const snapshots = new MemoryProjectionStore();
    const seen = (name: string) =>
      defineProjection({
        name,
        version: 1,
        eventTypes: ['ApiKeyRevoked'],
        initial: (): object[] => [],
        evolve(state, event) {
          state.push(event);
          return state;
        },
      });
    const a = new ProjectionRunner(store, snapshots, seen('a'));
    const b = new ProjectionRunner(store, snapshots, seen('b'));
    await a.start();
    await b.start();
    await store.append('k', [newEvent('ApiKeyRevoked', { keyId: 'k1', reason: 'test' })]);
    await store.append('k', [{ type: 'ApiKeyRevoked', data: { keyId: 42 } }]);
    const head = await store.headPosition();
    await Promise.all([a.waitFor(head), b.waitFor(head)]);
    // The invalid second event is passed over by both; the valid one is one object for both.
    expect(a.state).toHaveLength(1);
    expect(b.state).toHaveLength(1);
    expect(a.state[0]).toBe(b.state[0]);
    expect((a.state[0] as RecordedEvent).data).toEqual({ keyId: 'k1', reason: 'test' });
    await a.stop();
    await b.stop();
  });
});

describe('the shared log feed doorbell', () => {
  it('reads a commit of many events once, not once per event it was rung for', async () => {
    // Every appended event rings the doorbell; one read hands out the whole commit, so rings for
    // events already read must not each cost another (empty) read of the log.
    class CountingStore extends MemoryEventStore {
      reads = 0;
      override readAll(...args: Parameters<MemoryEventStore['readAll']>) {
        this.reads++;
        return super.readAll(...args);
      }
    }
    const store = new CountingStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), { ...order, name: 'doorbell' });
    await runner.start();
    await runner.waitFor(0);
    await new Promise((r) => setTimeout(r, 50));
    const before = store.reads;
    await store.append(
      's-1',
      Array.from({ length: 500 }, (_, n) => ({ type: 'N', data: { n } })),
    );
    await runner.waitFor(500);
    await new Promise((r) => setTimeout(r, 200));
    expect(runner.state).toHaveLength(500);
    expect(store.reads - before).toBeLessThan(20);
    await runner.stop();
  });
});
