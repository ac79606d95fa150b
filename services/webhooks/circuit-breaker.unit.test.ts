import { describe, expect, it } from 'vitest';
import { CircuitBreakers } from './circuit-breaker.ts';

describe('per-endpoint circuit breaker', () => {
  const E = 'https://hooks.example.com';

  it('opens after the threshold of timeouts in a row, only for that endpoint', () => {
    const b = new CircuitBreakers(3, [5_000, 300_000]);
    b.record(E, true, 0);
    b.record(E, true, 0);
    expect(b.decide(E, 0)).toEqual({ kind: 'send' });
    b.record(E, true, 1_000);
    expect(b.state(E)).toBe('open');
    expect(b.decide(E, 2_000)).toMatchObject({ kind: 'open', until: 6_000 });
    expect(b.peek(E, 2_000)).toMatchObject({ until: 6_000 });
    expect(b.decide('https://other.example.com', 2_000)).toEqual({ kind: 'send' });
  });

  it('an answer of any kind between timeouts resets the count', () => {
    const b = new CircuitBreakers(2, [5_000]);
    b.record(E, true, 0);
    b.record(E, false, 0);
    b.record(E, true, 0);
    expect(b.state(E)).toBe('closed');
  });

  it('lets one probe through after the delay; a timeout re-opens for the next delay, an answer closes', () => {
    const b = new CircuitBreakers(1, [5_000, 300_000], 1_000);
    b.record(E, true, 0);
    expect(b.peek(E, 5_000)).toBeNull();
    expect(b.decide(E, 5_000)).toEqual({ kind: 'probe' });
    expect(b.state(E)).toBe('half_open');
    // While the probe is out, everything else waits.
    expect(b.decide(E, 5_001)).toMatchObject({ kind: 'open', until: 6_001 });
    expect(b.peek(E, 5_001)).not.toBeNull();
    b.record(E, true, 6_000);
    expect(b.decide(E, 7_000)).toMatchObject({ kind: 'open', until: 306_000 });
    expect(b.decide(E, 306_000)).toEqual({ kind: 'probe' });
    b.record(E, false, 306_500);
    expect(b.state(E)).toBe('closed');
    expect(b.decide(E, 306_501)).toEqual({ kind: 'send' });
    expect(b.counts()).toEqual({ closed: 0, open: 0, half_open: 0 });
  });
});
