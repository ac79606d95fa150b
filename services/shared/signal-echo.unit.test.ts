import { describe, expect, it } from 'vitest';
import { isEcho, SIGNAL_ECHO_MS } from './signal-echo.ts';

describe('a repeated stop signal', () => {
  const first = { signal: 'SIGTERM' as const, at: 1_000_000 };

  it('is the first SIGTERM again when it comes within the window (a parent passing the group’s signal on)', () => {
    expect(isEcho(first, 'SIGTERM', first.at)).toBe(true);
    expect(isEcho(first, 'SIGTERM', first.at + SIGNAL_ECHO_MS - 1)).toBe(true);
  });

  it('is a second signal after the window, for a SIGINT, or when the first was a SIGINT', () => {
    expect(isEcho(first, 'SIGTERM', first.at + SIGNAL_ECHO_MS)).toBe(false);
    expect(isEcho(first, 'SIGINT', first.at + 1)).toBe(false);
    expect(isEcho({ signal: 'SIGINT', at: first.at }, 'SIGINT', first.at + 1)).toBe(false);
    expect(isEcho({ signal: 'SIGINT', at: first.at }, 'SIGTERM', first.at + 1)).toBe(false);
  });

  it('is never an echo before any signal', () => {
    expect(isEcho(null, 'SIGTERM', first.at)).toBe(false);
  });
});
