import type { EventStore } from '../adapters/event-store/port.ts';
import { runnersOn } from './runner.ts';

export interface LagReport {
  ok: boolean;
  detail?: string;
  head: number;
  maxLag: number;
  /** Projections further behind the head than `maxLag`, with how many events. */
  behind: Record<string, number>;
}

/**
 * Whether every projection running on `store` in this process is within `maxLag` events of the
 * head: a projection that answers requests (the key registry, quota, webhooks...) far behind
 * would answer from the past, e.g. refuse a key issued since, so /readyz says not ready meanwhile
 * (during a rebuild or the catch-up at start) and the load balancer sends traffic elsewhere.
 */
export async function projectionLag(store: EventStore, maxLag: number): Promise<LagReport> {
  const runners = runnersOn(store);
  const head = runners.length > 0 ? await store.headPosition() : 0;
  const behind: Record<string, number> = {};
  for (const runner of runners) {
    const lag = head - runner.checkpoint;
    if (lag > maxLag) behind[runner.name] = Math.max(behind[runner.name] ?? 0, lag);
  }
  const names = Object.keys(behind);
  return {
    ok: names.length === 0,
    ...(names.length > 0
      ? { detail: `behind the head by more than ${maxLag} events: ${names.join(', ')}` }
      : {}),
    head,
    maxLag,
    behind,
  };
}
