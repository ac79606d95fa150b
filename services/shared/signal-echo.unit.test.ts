import { describe, expect, it } from 'vitest';
import { isEcho, type SignalsSeen } from './signal-echo.ts';

describe('a repeated stop signal', () => {
  it('is the first signal’s copy once, however late it comes (a parent passing the group’s signal on)', () => {
    const first: SignalsSeen = { signal: 'SIGTERM', echoed: false };
    expect(isEcho(first, 'SIGTERM')).toBe(true);
    expect(isEcho(first, 'SIGTERM')).toBe(false);
    const ctrlC: SignalsSeen = { signal: 'SIGINT', echoed: false };
    expect(isEcho(ctrlC, 'SIGINT')).toBe(true);
    expect(isEcho(ctrlC, 'SIGINT')).toBe(false);
  });

  it('is a second signal when it is of another kind than the first', () => {
    const first: SignalsSeen = { signal: 'SIGTERM', echoed: false };
    expect(isEcho(first, 'SIGINT')).toBe(false);
    expect(isEcho({ signal: 'SIGINT', echoed: false }, 'SIGTERM')).toBe(false);
  });

  it('is never an echo before any signal', () => {
    expect(isEcho(null, 'SIGTERM')).toBe(false);
  });
});
