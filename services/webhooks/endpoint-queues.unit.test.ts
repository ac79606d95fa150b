import { describe, expect, it } from 'vitest';
import { preclaimRounds } from './delivery-worker.ts';
import { EndpointQueues } from './endpoint-queues.ts';

/** A task that records its start and finishes when the test says so. */
function gated(log: number[], id: number, gates: Map<number, () => void>) {
  return {
    run: () =>
      new Promise<void>((resolve) => {
        log.push(id);
        gates.set(id, resolve);
      }),
  };
}

describe('endpoint queues', () => {
  it('takes every task however many wait, and runs them in order, so many at a time', async () => {
    const queues = new EndpointQueues(2);
    const started: number[] = [];
    const gates = new Map<number, () => void>();
    const n = 5_000;
    for (let i = 0; i < n; i++) queues.push('https://a.example', gated(started, i, gates));
    expect(started).toEqual([0, 1]);
    expect(queues.waiting('https://a.example')).toBe(n - 2);
    expect(queues.size).toBe(n);
    // Another endpoint's task starts at once, whatever waits on the first.
    queues.push('https://b.example', gated(started, -1, gates));
    expect(started.at(-1)).toBe(-1);
    gates.get(-1)!();
    for (let i = 0; i < n; i++) {
      gates.get(i)!();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await queues.drained();
    expect(started.filter((id) => id >= 0)).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(queues.size).toBe(0);
    expect(queues.depths().size).toBe(0);
  });

  it('moves the waiting tasks picked to another endpoint, in order, into its slots; the rest stay', async () => {
    const queues = new EndpointQueues(1);
    const started: number[] = [];
    const gates = new Map<number, () => void>();
    const ids = new Map<object, number>();
    // Task 0 holds a's one slot (a hung request); 1-5 wait behind it.
    for (let i = 0; i < 6; i++) {
      const task = gated(started, i, gates);
      ids.set(task, i);
      queues.push('k https://a.example', task);
    }
    expect(started).toEqual([0]);
    const odd = (task: object) => ids.get(task)! % 2 === 1;
    expect(queues.move('k https://a.example', 'k https://b.example', (t) => (odd(t) ? t : null))).toBe(3);
    // b's one slot runs the first moved at once, without waiting for a's hung task.
    expect(started).toEqual([0, 1]);
    expect(queues.waiting('k https://a.example')).toBe(2);
    expect(queues.waiting('k https://b.example')).toBe(2);
    expect(queues.size).toBe(6);
    for (const id of [1, 3]) {
      gates.get(id)!();
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(started).toEqual([0, 1, 3, 5]);
    gates.get(5)!();
    gates.get(0)!();
    for (const id of [2, 4]) {
      await new Promise((resolve) => setImmediate(resolve));
      gates.get(id)!();
    }
    await queues.drained();
    expect(started).toEqual([0, 1, 3, 5, 2, 4]);
    expect(queues.depths().size).toBe(0);
  });

  it('prepares the next `prepareAhead` waiting tasks, in order, each once, as the queue moves', async () => {
    const queues = new EndpointQueues(2, 3);
    const started: number[] = [];
    const prepared: number[] = [];
    const gates = new Map<number, () => void>();
    const n = 20;
    for (let i = 0; i < n; i++) {
      const task = Object.assign(gated(started, i, gates), {
        prepare: () => {
          if (!prepared.includes(i)) prepared.push(i);
        },
      });
      queues.push('https://a.example', task);
    }
    // Two run, the three behind them are prepared, the rest are not yet.
    expect(started).toEqual([0, 1]);
    expect(prepared).toEqual([2, 3, 4]);
    for (let i = 0; i < n; i++) {
      gates.get(i)!();
      await new Promise((resolve) => setImmediate(resolve));
      // Never more than `prepareAhead` prepared and still waiting.
      expect(prepared.filter((id) => !started.includes(id)).length).toBeLessThanOrEqual(3);
    }
    await queues.drained();
    expect(prepared).toEqual(Array.from({ length: n - 2 }, (_, i) => i + 2));
    expect(started).toEqual(Array.from({ length: n }, (_, i) => i));
  });

  it('claims ahead only as many rounds as the stuck time leaves room for', () => {
    // Each round ahead adds up to one request's timeout before the send.
    expect(preclaimRounds({ timeoutMs: 15_000, stuckAfterMs: 120_000 })).toBe(4);
    expect(preclaimRounds({ timeoutMs: 2_000, stuckAfterMs: 6_000 })).toBe(1);
    expect(preclaimRounds({ timeoutMs: 2_000, stuckAfterMs: 2_500 })).toBe(0);
    expect(preclaimRounds({ timeoutMs: 2_000 })).toBe(0);
  });

  it("shares an origin's cap among its keys: each runs its share, and past the cap they take turns", async () => {
    const origin = 'https://shared.example';
    let keys = 2;
    const queues = new EndpointQueues(4, 0, { cap: 4, keysAt: () => keys });
    const started: string[] = [];
    const gates = new Map<string, () => void>();
    const task = (id: string) => ({
      run: () =>
        new Promise<void>((resolve) => {
          started.push(id);
          gates.set(id, resolve);
        }),
    });
    // Two keys subscribed there: a share of 2 each, reserved before the second has anything to send.
    for (let i = 0; i < 4; i++) queues.push(`k1 ${origin}`, task(`k1-${i}`));
    expect(started).toEqual(['k1-0', 'k1-1']);
    for (let i = 0; i < 4; i++) queues.push(`k2 ${origin}`, task(`k2-${i}`));
    expect(started).toEqual(['k1-0', 'k1-1', 'k2-0', 'k2-1']);
    // Another origin is not held by this one's cap.
    expect(queues.acquire(`k1 https://other.example`)).toBe(true);
    queues.release(`k1 https://other.example`);
    // Six keys there: one each, the cap's four slots taken in turn.
    keys = 6;
    for (const k of ['k3', 'k4', 'k5', 'k6']) queues.push(`${k} ${origin}`, task(`${k}-0`));
    expect(started).toHaveLength(4);
    const settle = async (id: string) => {
      gates.get(id)!();
      await new Promise((resolve) => setImmediate(resolve));
    };
    await settle('k1-0');
    await settle('k1-1');
    await settle('k2-0');
    await settle('k2-1');
    // k1 and k2 are over their new share of one until theirs end; the room goes to those waiting.
    expect(started.slice(4)).toEqual(['k3-0', 'k4-0', 'k5-0', 'k6-0']);
    expect(queues.tracked).toEqual({ endpoints: 6, origins: 1 });
    for (const k of ['k3', 'k4', 'k5', 'k6']) await settle(`${k}-0`);
    expect(started.slice(8)).toEqual(['k1-2', 'k2-2']);
    await settle('k1-2');
    await settle('k2-2');
    await settle('k1-3');
    await settle('k2-3');
    await queues.drained();
    // Idle endpoints and origins are forgotten.
    expect(queues.tracked).toEqual({ endpoints: 0, origins: 0 });
  });
});
