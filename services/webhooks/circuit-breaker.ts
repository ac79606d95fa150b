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
 *
 * A breaker is kept only while it says something: an endpoint that answers has none, and one whose
 * last requests timed out is forgotten once nothing has been asked of it for `idleMs` (a key's
 * subscription removed, or no event for it): closed, or open with its open period over by as long
 * (nothing came to be probed). An open breaker is never forgotten while it is open, nor while its
 * probe is out: removing and adding a subscription again does not reset it.
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
  /** When it was last asked (decide) or told an outcome (record). */
  lastAt: number;
}

/** How long a breaker nothing is asked of is kept (see CircuitBreakers). */
export const BREAKER_IDLE_MS = 3_600_000;

export type BreakerState = 'closed' | 'open' | 'half_open';

export class CircuitBreakers {
  private readonly breakers = new Map<string, Breaker>();

  constructor(
    private readonly threshold: number,
    /** Delays before each probe, in order; the last repeats. */
    private readonly probeDelays: number[],
    /** While a probe is out, others wait this long (its answer or timeout is in by then). */
    private readonly probeWaitMs = 15_000,
    /** A breaker nothing is asked of for this long is forgotten, unless open (see above). */
    private readonly idleMs = BREAKER_IDLE_MS,
  ) {}

  /** When the breakers were last looked over for ones to forget. */
  private sweptAt = Number.NEGATIVE_INFINITY;

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
    b.lastAt = now;
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
      // The one place the map grows: the idle ones go first.
      this.sweep(now);
      b = { timeouts: 0, opens: 0, openUntil: null, probing: false, lastAt: now };
      this.breakers.set(endpoint, b);
    }
    b.lastAt = now;
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

  /** Endpoints by state, for the metrics (idle ones forgotten first). */
  counts(now = Date.now()): Record<BreakerState, number> {
    this.sweep(now);
    const counts: Record<BreakerState, number> = { closed: 0, open: 0, half_open: 0 };
    for (const key of this.breakers.keys()) counts[this.state(key)]++;
    return counts;
  }

  /** Breakers kept (endpoints whose last requests timed out, and not yet forgotten). */
  get size(): number {
    return this.breakers.size;
  }

  /**
   * Forgets the breakers nothing was asked of for `idleMs`, except open ones before their open
   * period has been over for as long, and those probing. Looks them over at most once per tenth
   * of `idleMs`, so the map's walk costs nothing per request.
   */
  private sweep(now: number): void {
    if (now - this.sweptAt < this.idleMs / 10) return;
    this.sweptAt = now;
    for (const [endpoint, b] of this.breakers) {
      if (b.probing || now - b.lastAt < this.idleMs) continue;
      if (b.openUntil === null || now - b.openUntil >= this.idleMs) this.breakers.delete(endpoint);
    }
  }

  private delay(opens: number): number {
    return this.probeDelays[Math.min(opens, this.probeDelays.length - 1)] ?? 5_000;
  }
}
