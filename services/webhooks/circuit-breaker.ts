/**
 * Per-endpoint circuit breakers for endpoints that accept the connection (even complete TLS) and
 * never answer. An endpoint is an API key's origin (EndpointQueues.keyOf): one key's dead path on
 * a host opens no breaker for another key's subscriptions there. Each such request holds one of
 * the endpoint's slots for the whole timeout, so without a breaker its deliveries queue behind
 * each other for hours. After `threshold` timeouts
 * in a row the breaker opens: nothing is sent to the endpoint, and its deliveries are recorded
 * as failed with their next retry; after the next delay of the retry schedule one probe is let
 * through (half-open). An answer of any kind closes the breaker; another timeout re-opens it for
 * the schedule's next delay. Any answer (even a 500) or a fast connection error is not a
 * timeout: those endpoints do not hold slots and are left to the retry schedule.
 */

export type BreakerDecision =
  | { kind: 'send' }
  | { kind: 'probe' }
  | { kind: 'open'; until: number; reason: string };

interface Breaker {
  timeouts: number;
  /** Opens in a row without an answer in between: indexes the probe delays. */
  opens: number;
  openUntil: number | null;
  probing: boolean;
}

export type BreakerState = 'closed' | 'open' | 'half_open';

export class CircuitBreakers {
  private readonly breakers = new Map<string, Breaker>();

  constructor(
    private readonly threshold: number,
    /** Delays before each probe, in order; the last repeats. */
    private readonly probeDelays: number[],
    /** While a probe is out, others wait this long (its answer or timeout is in by then). */
    private readonly probeWaitMs = 15_000,
  ) {}

  /**
   * Without changing anything: when and why the endpoint is closed to new work, or null when a
   * request (or the due probe) may go ahead.
   */
  peek(endpoint: string, now: number): { until: number; reason: string } | null {
    const b = this.breakers.get(endpoint);
    if (!b || b.openUntil === null || (now >= b.openUntil && !b.probing)) return null;
    const decision = this.openDecision(b, now);
    return { until: decision.until, reason: decision.reason };
  }

  /** Whether to send now; a 'probe' is the one request let through after the open period. */
  decide(endpoint: string, now: number): BreakerDecision {
    const b = this.breakers.get(endpoint);
    if (!b || b.openUntil === null) return { kind: 'send' };
    if (now >= b.openUntil && !b.probing) {
      b.probing = true;
      return { kind: 'probe' };
    }
    return this.openDecision(b, now);
  }

  private openDecision(b: Breaker, now: number): Extract<BreakerDecision, { kind: 'open' }> {
    return {
      kind: 'open',
      until: b.probing || b.openUntil === null ? now + this.probeWaitMs : b.openUntil,
      reason: `circuit open: ${b.timeouts} requests in a row got no answer in time; probing on the retry schedule`,
    };
  }

  /** The outcome of a request that was sent (`timedOut`: no complete answer in time). */
  record(endpoint: string, timedOut: boolean, now: number): void {
    let b = this.breakers.get(endpoint);
    if (!timedOut) {
      this.breakers.delete(endpoint);
      return;
    }
    if (!b) {
      b = { timeouts: 0, opens: 0, openUntil: null, probing: false };
      this.breakers.set(endpoint, b);
    }
    b.timeouts++;
    if (b.probing || (b.openUntil === null && b.timeouts >= this.threshold)) {
      b.openUntil = now + this.delay(b.opens);
      b.opens++;
      b.probing = false;
    }
  }

  state(endpoint: string): BreakerState {
    const b = this.breakers.get(endpoint);
    if (!b || b.openUntil === null) return 'closed';
    return b.probing ? 'half_open' : 'open';
  }

  /** Endpoints by state, for the metrics. */
  counts(): Record<BreakerState, number> {
    const counts: Record<BreakerState, number> = { closed: 0, open: 0, half_open: 0 };
    for (const key of this.breakers.keys()) counts[this.state(key)]++;
    return counts;
  }

  private delay(opens: number): number {
    return this.probeDelays[Math.min(opens, this.probeDelays.length - 1)] ?? 5_000;
  }
}
