import { describe, expect, it } from 'vitest';
import { sentValues } from './raw-headers.ts';

describe('sentValues', () => {
  it("is every value of the field, in the order sent, whatever the name's case", () => {
    const raw = [
      'Host',
      'a',
      'content-type',
      'text/plain',
      'X-Other',
      'x',
      'Content-Type',
      'application/json',
    ];
    expect(sentValues(raw, 'content-type')).toEqual(['text/plain', 'application/json']);
    expect(sentValues(raw, 'host')).toEqual(['a']);
    expect(sentValues(raw, 'authorization')).toEqual([]);
  });
});
