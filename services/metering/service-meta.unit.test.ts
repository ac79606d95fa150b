import { describe, expect, it } from 'vitest';
import { isWellFormedKey } from '../keys/key-material.ts';
import { presentedCredential } from './service-meta.ts';

const KEY = `sk_live_${'A'.repeat(43)}`;
const read = (headers: Record<string, string | undefined>) => presentedCredential(headers, isWellFormedKey);

describe('presentedCredential: Authorization: Bearer is the only way a key applies', () => {
  it('applies a Bearer key (scheme case-insensitive, surrounding spaces tolerated)', () => {
    expect(read({ authorization: `Bearer ${KEY}` })).toEqual({ kind: 'bearer', token: KEY });
    expect(read({ authorization: `bearer  ${KEY} ` })).toEqual({ kind: 'bearer', token: KEY });
  });

  it('missing header: ABSENT, nothing presented', () => {
    expect(read({})).toEqual({ kind: 'none', outcome: 'ABSENT', presented: false });
    expect(read({ authorization: '' })).toEqual({ kind: 'none', outcome: 'ABSENT', presented: false });
  });

  it('another header name: ABSENT, presented, and says which header was ignored', () => {
    const result = read({ 'x-api-key': KEY });
    expect(result).toMatchObject({ kind: 'none', outcome: 'ABSENT', presented: true });
    expect(result.kind === 'none' && result.detail).toContain('x-api-key');
  });

  it('missing Bearer prefix or another scheme: MALFORMED', () => {
    expect(read({ authorization: KEY })).toMatchObject({
      kind: 'none',
      outcome: 'MALFORMED',
      presented: true,
    });
    expect(read({ authorization: `Basic ${KEY}` })).toMatchObject({ kind: 'none', outcome: 'MALFORMED' });
    expect(read({ authorization: `Bearer ${KEY} extra` })).toMatchObject({
      kind: 'none',
      outcome: 'MALFORMED',
    });
  });

  it('a Bearer token that is not shaped like a key: MALFORMED', () => {
    expect(read({ authorization: 'Bearer hello' })).toMatchObject({ kind: 'none', outcome: 'MALFORMED' });
  });
});
