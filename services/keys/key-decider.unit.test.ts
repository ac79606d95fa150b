import { describe, expect, it } from 'vitest';
import { decideKey, evolveKey, type KeyEvent, KeyRuleError, type KeyState } from './key-decider.ts';
import { generateApiKey, hashApiKey, isWellFormedKey, LIVE_KEY_PREFIX } from './key-material.ts';

const issued: KeyEvent = {
  type: 'ApiKeyIssued',
  data: {
    keyId: 'key_a',
    keyHash: 'a'.repeat(64),
    prefix: 'sk_live_abcd',
    plan: 'starter',
    owner: 'ops',
    via: 'operator',
  },
};

function given(events: KeyEvent[]): KeyState | null {
  return events.reduce<KeyState | null>(evolveKey, null);
}

describe('key decider: given events, when command, then events', () => {
  it('issues into an empty stream, and refuses a second issue', () => {
    expect(decideKey({ kind: 'issue', data: issued.data }, given([]))).toEqual([issued]);
    expect(() => decideKey({ kind: 'issue', data: issued.data }, given([issued]))).toThrow(
      expect.objectContaining({ code: 'key_exists' }),
    );
  });

  it('changes the plan, naming from and to', () => {
    expect(decideKey({ kind: 'changePlan', keyId: 'key_a', to: 'pro' }, given([issued]))).toEqual([
      { type: 'ApiKeyPlanChanged', data: { keyId: 'key_a', from: 'starter', to: 'pro' } },
    ]);
  });

  it('refuses a plan change to the same plan, on a revoked key, or on a key it does not hold', () => {
    const revoked: KeyEvent = { type: 'ApiKeyRevoked', data: { keyId: 'key_a', reason: 'leaked' } };
    const attempt = (state: KeyState | null, keyId = 'key_a', to: 'starter' | 'pro' = 'pro') => {
      try {
        decideKey({ kind: 'changePlan', keyId, to }, state);
        return null;
      } catch (err) {
        return err instanceof KeyRuleError ? err.code : 'other';
      }
    };
    expect(attempt(given([issued]), 'key_a', 'starter')).toBe('plan_unchanged');
    expect(attempt(given([issued, revoked]))).toBe('key_revoked');
    expect(attempt(given([issued]), 'key_b')).toBe('key_not_found');
    expect(attempt(given([]))).toBe('key_not_found');
  });

  it('revokes once; a second revoke is refused', () => {
    const events = decideKey({ kind: 'revoke', keyId: 'key_a', reason: 'leaked' }, given([issued]));
    expect(events).toEqual([{ type: 'ApiKeyRevoked', data: { keyId: 'key_a', reason: 'leaked' } }]);
    expect(() =>
      decideKey({ kind: 'revoke', keyId: 'key_a', reason: 'again' }, given([issued, ...events])),
    ).toThrow(expect.objectContaining({ code: 'key_revoked' }));
  });
});

describe('key material', () => {
  it('has the live prefix, 256 bits of entropy, and a sha256 hash that matches the key', () => {
    const a = generateApiKey();
    const b = generateApiKey();
    expect(a.key.startsWith(LIVE_KEY_PREFIX)).toBe(true);
    expect(Buffer.from(a.key.slice(LIVE_KEY_PREFIX.length), 'base64url')).toHaveLength(32);
    expect(a.keyHash).toMatch(/^[0-9a-f]{64}$/);
    expect(a.keyHash).toBe(hashApiKey(a.key));
    expect(a.key).not.toBe(b.key);
    expect(a.keyId).not.toBe(b.keyId);
    expect(a.keyId).not.toContain(a.key.slice(LIVE_KEY_PREFIX.length, LIVE_KEY_PREFIX.length + 8));
    expect(isWellFormedKey(a.key)).toBe(true);
  });

  it('tells a key-shaped token from others', () => {
    expect(isWellFormedKey('sk_live_short')).toBe(false);
    expect(isWellFormedKey(`sk_test_${'a'.repeat(43)}`)).toBe(false);
    expect(isWellFormedKey(`sk_live_${'a'.repeat(43)}`)).toBe(true);
    expect(isWellFormedKey(`sk_live_${'a'.repeat(42)}!`)).toBe(false);
  });
});
