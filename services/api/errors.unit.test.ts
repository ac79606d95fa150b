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

  it('is never cut inside a percent-escape or the escapes of one UTF-8 character', () => {
    const pad = (n: number) => `/${'a'.repeat(n - 1)}`;
    // '%2F' with its '%' or '%2' last before the cut: the escape goes whole.
    expect(echoedPath(`${pad(ECHOED_PATH_CHARS - 1)}%2Fz`)).toBe(`${pad(ECHOED_PATH_CHARS - 1)}…`);
    expect(echoedPath(`${pad(ECHOED_PATH_CHARS - 2)}%2Fz`)).toBe(`${pad(ECHOED_PATH_CHARS - 2)}…`);
    expect(echoedPath(`${pad(ECHOED_PATH_CHARS - 3)}%2Fz`)).toBe(`${pad(ECHOED_PATH_CHARS - 3)}%2F…`);
    // An emoji's four escapes (12 characters), the cut anywhere inside them: the emoji goes whole.
    const emoji = encodeURIComponent('😀');
    for (let inside = 1; inside < emoji.length; inside++) {
      const before = pad(ECHOED_PATH_CHARS - inside);
      const echoed = echoedPath(`${before}${emoji}tail`);
      expect(echoed, `${inside} characters of it before the cut`).toBe(`${before}…`);
      expect(() => decodeURIComponent(echoed)).not.toThrow();
    }
    // Its last escape the last before the cut: it is kept.
    const kept = pad(ECHOED_PATH_CHARS - emoji.length);
    expect(echoedPath(`${kept}${emoji}tail`)).toBe(`${kept}${emoji}…`);
    // A two-byte character (é, %C3%A9) cut after its first byte.
    const e = pad(ECHOED_PATH_CHARS - 3);
    expect(echoedPath(`${e}%C3%A9z`)).toBe(`${e}…`);
  });
});
