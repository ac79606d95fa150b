import type { EventStore } from '../adapters/event-store/port.ts';
import { runnersOn } from './runner.ts';

export interface LagReport {
  ok: boolean;
  detail?: string;
  /** The store's head; left out where no projection runs in this process (none was read). */
  head?: number;
  maxLag: number;
  /** Projections further behind the head than `maxLag`, with how many events. */
  behind: Record<string, number>;
}

/**
 * How many events a reader at `checkpoint` is behind `head`. Where positions are consecutive that
 * is their difference. Where they are byte offsets (KurrentDB) the difference is bytes, hundreds to
 * thousands of times the events, so the events after the checkpoint are counted instead, reading
 * no more than `cap` + 1 of them: a figure above `cap` means only "more than `cap`".
 */
export async function eventsBehind(
  store: EventStore,
  checkpoint: number,
  head: number,
  cap: number,
): Promise<number> {
  const span = Math.max(0, head - checkpoint);
  if (store.densePositions || span === 0) return span;
  if (store.countCommitted) return store.countCommitted(checkpoint, head, cap);
  const read = await store.readAll({ after: checkpoint, maxCount: cap + 1 });
  // Events appended since `head` was read are not behind it.
  return read.filter((e) => e.position <= head).length;
}

/**
 * `eventsBehind` for several readers against one head, each distinct checkpoint counted once:
 * runners of one process often stand at the same checkpoint, and on a store of byte positions
 * every count is a read.
 */
export function behindHead(
  store: EventStore,
  head: number,
  cap: number,
): (checkpoint: number) => Promise<number> {
  const counted = new Map<number, Promise<number>>();
  return (checkpoint) => {
    let behind = counted.get(checkpoint);
    if (behind === undefined) {
      behind = eventsBehind(store, checkpoint, head, cap);
      counted.set(checkpoint, behind);
    }
    return behind;
  };
}

/**
 * The events each projection running on `store` in this process is behind the head, by projection
 * name (counted up to `cap` + 1 on a store of byte positions). Two runners of one projection (rare:
 * one per role in a combined process): the one behind counts. No runners: no read at all.
 */
export async function runnerLags(
  store: EventStore,
  cap: number,
): Promise<{ head: number; lags: Map<string, number> }> {
  const runners = runnersOn(store);
  const lags = new Map<string, number>();
  if (runners.length === 0) return { head: 0, lags };
  const head = await store.headPosition();
  const count = behindHead(store, head, cap);
  const behind = await Promise.all(runners.map((runner) => count(runner.checkpoint)));
  runners.forEach((runner, i) => {
    lags.set(runner.name, Math.max(lags.get(runner.name) ?? 0, behind[i]!));
  });
  return { head, lags };
}

/**
 * Whether every projection running on `store` in this process is within `maxLag` events of the
 * head: a projection that answers requests (the key registry, quota, webhooks...) far behind
 * would answer from the past, e.g. refuse a key issued since, so /readyz says not ready meanwhile
 * (during a rebuild or the catch-up at start) and the load balancer sends traffic elsewhere.
 */
export async function projectionLag(store: EventStore, maxLag: number): Promise<LagReport> {
  const { head, lags } = await runnerLags(store, maxLag);
  // A role without projections (the engine) reads no head: a `head: 0` beside the event store's
  // real head read as a log that had gone back to empty.
  if (lags.size === 0) return { ok: true, detail: 'no projection runs in this process', maxLag, behind: {} };
  const gating = new Set(
    runnersOn(store)
      .filter((runner) => runner.gatesReadiness)
      .map((runner) => runner.name),
  );
  const behind: Record<string, number> = {};
  for (const [name, lag] of lags) if (lag > maxLag && gating.has(name)) behind[name] = lag;
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
