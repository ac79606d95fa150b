import { describe, expect, it } from 'vitest';
import { parseMarker } from './validate.ts';

describe('parseMarker', () => {
  it('reads each stored marker as written, the same text again and a new one alike', () => {
    const a = JSON.stringify({ id: 'g1', position: 5 });
    const b = JSON.stringify({ id: 'g2', position: 9 });
    expect(parseMarker(a)).toEqual({ id: 'g1', position: 5 });
    expect(parseMarker(a)).toEqual({ id: 'g1', position: 5 });
    expect(parseMarker(b)).toEqual({ id: 'g2', position: 9 });
    expect(parseMarker(a)).toEqual({ id: 'g1', position: 5 });
    expect(parseMarker('not json')).toBeNull();
    expect(parseMarker('not json')).toBeNull();
    expect(parseMarker(JSON.stringify({ id: 'g1' }))).toBeNull();
    expect(parseMarker(null)).toBeNull();
  });

  it('hands out markers no caller can change for the next reader', () => {
    const raw = JSON.stringify({ id: 'g3', position: 1 });
    const first = parseMarker(raw)!;
    expect(Object.isFrozen(first)).toBe(true);
    expect(() => {
      (first as { id: string }).id = 'other';
    }).toThrow(TypeError);
    expect(parseMarker(raw)).toEqual({ id: 'g3', position: 1 });
  });
});
