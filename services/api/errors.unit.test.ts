import { describe, expect, it } from 'vitest';
import { ECHOED_PATH_CHARS, echoedPath, noRouteDetail } from './errors.ts';

describe('the path a refusal echoes', () => {
  it('is the path without its query', () => {
    expect(echoedPath('/nowhere?token=secret&x=1')).toBe('/nowhere');
    expect(echoedPath('/nowhere')).toBe('/nowhere');
    expect(noRouteDetail('GET', '/nowhere?token=secret')).toBe('no route GET /nowhere');
  });

  it('is cut at ECHOED_PATH_CHARS with an ellipsis, a path of that length whole', () => {
    const whole = `/${'a'.repeat(ECHOED_PATH_CHARS - 1)}`;
    expect(echoedPath(whole)).toBe(whole);
    expect(echoedPath(`${whole}b?q=1`)).toBe(`${whole}…`);
    expect(echoedPath(`/${'a'.repeat(16_000)}`)).toHaveLength(ECHOED_PATH_CHARS + 1);
  });

  it('is never cut between the halves of a surrogate pair', () => {
    // The emoji's high surrogate is the last character the cut keeps: the pair goes whole.
    const path = `/${'a'.repeat(ECHOED_PATH_CHARS - 2)}😀tail`;
    const echoed = echoedPath(path);
    expect(echoed).toBe(`/${'a'.repeat(ECHOED_PATH_CHARS - 2)}…`);
    // A lone surrogate would not survive UTF-8.
    expect(Buffer.from(echoed).toString()).toBe(echoed);
    // Ending just after the pair, it is kept.
    expect(echoedPath(`/${'a'.repeat(ECHOED_PATH_CHARS - 3)}😀tail`)).toBe(
      `/${'a'.repeat(ECHOED_PATH_CHARS - 3)}😀…`,
    );
  });
});
