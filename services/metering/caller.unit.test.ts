import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { HANG_MS } from '../../test/waits.ts';
import { changeKeyPlan, issueKey, revokeKey } from '../keys/key-commands.ts';
import { keyRegistryProjection } from '../keys/key-registry.ts';
import { KeyResolver } from '../keys/key-resolver.ts';
import { addressScope, type Caller, CallerRejectedError, credentialOf, resolveCaller } from './caller.ts';

describe('the caller of a remembered key', () => {
  it('answers a key asked again from memory until the registry changes, then looks again', async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), keyRegistryProjection);
    const resolver = new KeyResolver({ runner, store });
    const keys = { headers: {}, clientAddress: '10.0.0.1' };
    const issued = await issueKey(store, { plan: 'starter', owner: 'o', via: 'operator' });
    const asKey = { ...keys, headers: { authorization: `Bearer ${issued.key}` } };
    await runner.start();
    try {
      await runner.waitFor(await store.headPosition(), HANG_MS);
      const first = resolver.resolve(issued.key);
      expect(resolver.resolve(issued.key)).toBe(first);
      const caller = resolveCaller(resolver, asKey) as Caller;
      expect(caller).toMatchObject({ auth: { tier: 'starter' }, subject: { plan: 'starter' } });
      // One caller per remembered lookup, shared by that key's requests, so frozen.
      expect(resolveCaller(resolver, asKey)).toBe(caller);
      expect([caller, caller.auth, caller.subject].every((part) => Object.isFrozen(part))).toBe(true);
      // Another key issued: the registry moved, the first key is looked up again (same answer).
      const other = await issueKey(store, { plan: 'pro', owner: 'p', via: 'operator' });
      await runner.waitFor(await store.headPosition(), HANG_MS);
      expect(resolver.resolve(issued.key)).not.toBe(first);
      expect(resolver.resolve(other.key)).toMatchObject({ status: 'active', record: { plan: 'pro' } });
      // A plan change and a revocation are seen on the next call, though the key was remembered.
      const stream = `apikey-${issued.keyId}`;
      await runner.waitFor(await changeKeyPlan(store, stream, issued.keyId, 'pro'), HANG_MS);
      expect(resolveCaller(resolver, asKey)).toMatchObject({
        auth: { tier: 'pro' },
        subject: { plan: 'pro' },
      });
      await runner.waitFor(await revokeKey(store, stream, issued.keyId, 'leaked'), HANG_MS);
      expect(resolver.resolve(issued.key)).toMatchObject({ status: 'revoked' });
      expect(resolveCaller(resolver, asKey)).toBeInstanceOf(CallerRejectedError);
    } finally {
      await runner.stop();
    }
  });
});

const KEY = `sk_live_${'A'.repeat(43)}`;
const read = (headers: Record<string, string | undefined>) =>
  credentialOf({ headers, clientAddress: '10.0.0.2' });
const auth = (headers: Record<string, string | undefined>) => (read(headers) as Caller).auth;

describe('credentialOf: Authorization: Bearer is the only way a key applies', () => {
  it('applies a Bearer key (scheme case-insensitive, surrounding spaces tolerated)', () => {
    expect(read({ authorization: `Bearer ${KEY}` })).toBe(KEY);
    expect(read({ authorization: `bearer  ${KEY} ` })).toBe(KEY);
  });

  it('missing header: ABSENT, nothing presented, an anonymous caller', () => {
    expect(read({})).toMatchObject({ keyId: null, subject: { kind: 'anonymous', plan: 'free' } });
    expect(auth({})).toEqual({ outcome: 'ABSENT', presented: false, tier: 'free' });
    expect(auth({ authorization: '' })).toEqual({ outcome: 'ABSENT', presented: false, tier: 'free' });
  });

  it('another header name: ABSENT, presented, and says which header was ignored', () => {
    expect(auth({ 'x-api-key': KEY })).toMatchObject({ outcome: 'ABSENT', presented: true });
    expect(auth({ 'x-api-key': KEY }).detail).toContain('x-api-key');
  });

  it('a key in the query string: ABSENT, presented, and says which parameter was ignored', () => {
    const inUrl = (url: string) =>
      (credentialOf({ headers: {}, clientAddress: '10.0.0.2', url }) as Caller).auth;
    expect(inUrl(`/x402/get_trade_call?coin=BTC&api_key=${KEY}`)).toEqual({
      outcome: 'ABSENT',
      presented: true,
      tier: 'free',
      detail: `query parameter api_key was ignored: a key applies only as the header "Authorization: Bearer <key>"`,
    });
    // Every form the x402 quote's resource leaves out (withoutCredentialParams) is named: a test key,
    // a percent-encoded key, a secret-looking name; a bare key by its prefix only.
    const named = (url: string) => inUrl(url).detail?.split(' was ignored')[0];
    expect(named(`/v1/x?coin=BTC&key=sk_test_${'B'.repeat(24)}`)).toBe('query parameter key');
    expect(named(`/v1/x?apiKey=sk%5Flive_${'A'.repeat(43)}`)).toBe('query parameter apiKey');
    expect(named(`/v1/x?k=sk%5ftest%5F${'B'.repeat(24)}`)).toBe('query parameter k');
    expect(named('/v1/x?coin=BTC&access_token=abc')).toBe('query parameter access_token');
    expect(named(`/v1/x?${KEY}`)).toBe('query parameter sk_live_…');
    expect(inUrl(`/v1/x?k=sk%5Ftest_1`)).toMatchObject({ outcome: 'ABSENT', presented: true });
    // A query without a key's value names nothing.
    expect(inUrl('/api/track-record?window=7d')).toEqual({
      outcome: 'ABSENT',
      presented: false,
      tier: 'free',
    });
  });

  it('missing Bearer prefix or another scheme: MALFORMED', () => {
    expect(auth({ authorization: KEY })).toMatchObject({ outcome: 'MALFORMED', presented: true });
    expect(auth({ authorization: `Basic ${KEY}` })).toMatchObject({ outcome: 'MALFORMED' });
    expect(auth({ authorization: `Bearer ${KEY} extra` })).toMatchObject({ outcome: 'MALFORMED' });
  });

  it('a Bearer token that is not shaped like a key: MALFORMED', () => {
    expect(auth({ authorization: 'Bearer hello' })).toMatchObject({ outcome: 'MALFORMED' });
  });

  it('a live key cut when copied, or with a stray character: MALFORMED, saying so without showing it', () => {
    const key = 'sk_live_abcdefghij0123456789ABCDEFGHIJ_-klmnopqrstu';
    expect(read({ authorization: `Bearer ${key}` })).toBe(key);
    const cut = auth({ authorization: `Bearer ${key.slice(0, -5)}` });
    expect(cut).toMatchObject({ outcome: 'MALFORMED', presented: true, tier: 'free' });
    expect(cut.detail).toBe(
      'the Bearer token starts like a live key but has 38 characters after sk_live_, not 43 (a live key is sk_live_ then 43 characters of A–Z, a–z, 0–9, _ and -): send the key whole, as it was shown',
    );
    const stray = auth({ authorization: `Bearer ${key.slice(0, -1)}!` });
    expect(stray.detail).toMatch(/^the Bearer token starts like a live key but holds a character no key has/);
    for (const detail of [cut.detail, stray.detail]) expect(detail).not.toContain('abcdef');
  });
});

describe('the anonymous caller of a client address', () => {
  it('is one caller per IPv6 /64 and per IPv4 address', () => {
    expect(addressScope('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64');
    expect(addressScope('2001:DB8:1:2::ffff')).toBe('2001:db8:1:2::/64');
    expect(addressScope('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressScope('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressScope('::1')).toBe('0:0:0:0::/64');
    expect(addressScope('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressScope('192.0.2.7')).toBe('192.0.2.7');
    const subject = (clientAddress: string) =>
      (credentialOf({ headers: {}, clientAddress }) as Caller).subject.id;
    expect(subject('2001:db8:1:2::a')).toBe(subject('2001:db8:1:2:ffff::b'));
    expect(subject('2001:db8:1:3::a')).not.toBe(subject('2001:db8:1:2::a'));
    expect(subject('192.0.2.7')).not.toBe(subject('192.0.2.8'));
  });
});
