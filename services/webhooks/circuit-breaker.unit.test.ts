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

  it('forgets the breakers of idle endpoints, never one that is open or probing', () => {
    // Idle after 10 s; the open period is a minute.
    const b = new CircuitBreakers(3, [60_000], 1_000, 10_000);
    const many = Array.from({ length: 100 }, (_, i) => `k${i} https://shared.example`);
    // A timeout each (closed, one in a row), then nothing more: their subscriptions removed.
    for (const e of many) b.record(e, true, 0);
    const open = 'dead https://shared.example';
    for (let i = 0; i < 3; i++) b.record(open, true, 0);
    expect(b.counts(5_000)).toEqual({ closed: 100, open: 1, half_open: 0 });
    // Idle past 10 s: the closed ones go, the open one stays for its whole open period.
    expect(b.counts(20_000)).toEqual({ closed: 0, open: 1, half_open: 0 });
    expect(b.size).toBe(1);
    // Its open period over, still kept for as long again: its held deliveries come for the probe.
    expect(b.counts(65_000)).toEqual({ closed: 0, open: 1, half_open: 0 });
    expect(b.peek(open, 65_000)).toBeNull();
    expect(b.decide(open, 65_000)).toEqual({ kind: 'probe' });
    // Probing, it stays however long the probe takes.
    expect(b.counts(200_000)).toEqual({ closed: 0, open: 0, half_open: 1 });
    b.record(open, true, 200_000);
    expect(b.peek(open, 230_000)).toMatchObject({ until: 260_000 });
    expect(b.counts(265_000)).toEqual({ closed: 0, open: 1, half_open: 0 });
    for (const e of many) b.record(e, true, 265_000);
    expect(b.size).toBe(101);
    // Where the map grows (a new endpoint's first timeout), the idle ones go first: those 100, and
    // the open one, its open period over for longer than the idle time with nothing to probe.
    b.record('late https://shared.example', true, 400_000);
    expect(b.size).toBe(1);
    expect(b.state(open)).toBe('closed');
  });
});
