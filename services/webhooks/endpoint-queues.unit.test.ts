import { describe, expect, it } from 'vitest';
import { EndpointQueues } from './endpoint-queues.ts';

/** A task that records its start and finishes when the test says so. */
function gated(log: number[], id: number, gates: Map<number, () => void>) {
  return () =>
    new Promise<void>((resolve) => {
      log.push(id);
      gates.set(id, resolve);
    });
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
});
