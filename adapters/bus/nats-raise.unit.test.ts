import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { type RaiseRetry, type ReplicaRaiseTarget, retryReplicaRaise } from './nats.ts';
import type { BusSettingDrift } from './port.ts';

// A refused raise of the stream's replicas, as the bus start reports it, tried again in the background.
const logger = pino({ level: 'silent' });
const fast: RaiseRetry = { firstPauseMs: 1, maxPauseMs: 4, forMs: 5_000 };
const refused = (): BusSettingDrift & { wanted: number } => ({
  setting: 'replicas',
  wanted: 3,
  found: 1,
  updated: false,
  error: 'insufficient resources',
});

/** A stream whose raise is refused `refusals` times, then takes. */
function stream(refusals: number) {
  const state = { replicas: 1, tries: 0 };
  const target: ReplicaRaiseTarget = {
    replicas: async () => state.replicas,
    raise: async (replicas) => {
      state.tries++;
      if (state.tries <= refusals) throw new Error(`peer lagging (${state.tries})`);
      state.replicas = replicas;
    },
  };
  return { state, target };
}

describe('retryReplicaRaise', () => {
  it('tries again until the raise takes, then reports it updated without the refusal', async () => {
    const entry = refused();
    const { state, target } = stream(3);
    expect(await retryReplicaRaise(entry, target, fast, logger, new AbortController().signal)).toBe(true);
    expect(state).toEqual({ replicas: 3, tries: 4 });
    expect(entry).toEqual({ setting: 'replicas', wanted: 3, found: 1, updated: true });
  });

  it('stops once the stream has the copies, without raising it again (another process did)', async () => {
    const entry = refused();
    const { state, target } = stream(0);
    state.replicas = 3;
    expect(await retryReplicaRaise(entry, target, fast, logger, new AbortController().signal)).toBe(true);
    expect(state.tries).toBe(0);
    expect(entry.updated).toBe(true);
  });

  it('gives up after forMs, reporting the last refusal', async () => {
    const entry = refused();
    const { state, target } = stream(Number.POSITIVE_INFINITY);
    const started = Date.now();
    const retry = { firstPauseMs: 5, maxPauseMs: 20, forMs: 200 };
    expect(await retryReplicaRaise(entry, target, retry, logger, new AbortController().signal)).toBe(false);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(state.tries).toBeGreaterThan(2);
    expect(state.replicas).toBe(1);
    expect(entry).toEqual({ ...refused(), error: `peer lagging (${state.tries})` });
  });

  it('ends when the bus closes (the signal aborts) during a pause', async () => {
    const entry = refused();
    const { state, target } = stream(Number.POSITIVE_INFINITY);
    const closing = new AbortController();
    const retry = { firstPauseMs: 60_000, maxPauseMs: 60_000, forMs: 600_000 };
    const done = retryReplicaRaise(entry, target, retry, logger, closing.signal);
    closing.abort();
    expect(await done).toBe(false);
    expect(state.tries).toBe(0);
    expect(entry.updated).toBe(false);
  });
});
