import { describe, expect, it } from 'vitest';
import { createMemoryCache } from '../../adapters/cache/memory.ts';
import { canonicalJson } from '../../contracts/canonical-json.ts';
import { PayerExposure } from './exposure.ts';
import { requestFingerprint } from './paid-responses.ts';

describe('PayerExposure', () => {
  it('admits while balance minus what is in flight covers the amount; a release frees it', async () => {
    const exposure = new PayerExposure();
    const balance = async () => 50n;
    const decisions = await Promise.all([1, 2, 3].map(() => exposure.admit('A', 20n, balance)));
    expect(decisions.map((d) => d.ok)).toEqual([true, true, false]);
    expect(decisions[2]).toMatchObject({ ok: false, balance: 50n, inFlight: 40n });
    expect(await exposure.held('a')).toBe(40n);
    if (decisions[0]!.ok) decisions[0]!.release();
    if (decisions[0]!.ok) decisions[0]!.release(); // twice is once
    expect((await exposure.admit('A', 20n, balance)).ok).toBe(true);
    expect(await exposure.held('A')).toBe(40n);
    // Another account is not affected.
    expect((await exposure.admit('B', 50n, balance)).ok).toBe(true);
  });

  it('a failing balance read admits nothing and holds nothing', async () => {
    const exposure = new PayerExposure();
    await expect(exposure.admit('A', 1n, async () => Promise.reject(new Error('rpc down')))).rejects.toThrow(
      'rpc down',
    );
    expect(await exposure.held('A')).toBe(0n);
  });
});

describe('PayerExposure on a shared cache (replicas)', () => {
  it('bounds one in-flight sum per payer across instances sharing the cache', async () => {
    const cache = createMemoryCache();
    const replicas = [0, 1, 2].map(() => new PayerExposure({ cache, holdMs: 60_000 }));
    const balance = async () => 50n;
    const decisions = await Promise.all(replicas.map((r) => r.admit('A', 20n, balance)));
    expect(decisions.filter((d) => d.ok)).toHaveLength(2);
    expect(decisions.find((d) => !d.ok)).toMatchObject({ ok: false, balance: 50n, inFlight: 40n });
    expect(await replicas[2]!.held('a')).toBe(40n);
    // A release on one replica frees the amount for all.
    const admitted = decisions.find((d) => d.ok)!;
    if (admitted.ok) admitted.release();
    await expect.poll(() => replicas[2]!.held('A')).toBe(20n);
    expect((await replicas[2]!.admit('A', 20n, balance)).ok).toBe(true);
    // Another payer is not affected; a balance beyond 2^53 atomic units is capped, not wrapped.
    expect((await replicas[0]!.admit('B', 50n, async () => 2n ** 80n)).ok).toBe(true);
  });

  it('an amount held by a replica that died is freed when its window expires', async () => {
    const cache = createMemoryCache();
    const dead = new PayerExposure({ cache, holdMs: 50 });
    expect((await dead.admit('A', 50n, async () => 50n)).ok).toBe(true);
    const live = new PayerExposure({ cache, holdMs: 50 });
    expect((await live.admit('A', 50n, async () => 50n)).ok).toBe(false);
    await new Promise((r) => setTimeout(r, 80));
    expect((await live.admit('A', 50n, async () => 50n)).ok).toBe(true);
  });
});

describe('requestFingerprint', () => {
  it('the same arguments in another order are the same request', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }] })).toBe('{"a":[{"c":3,"d":2}],"b":1}');
    expect(requestFingerprint('t', { a: 1, b: 2 })).toBe(requestFingerprint('t', { b: 2, a: 1 }));
    expect(requestFingerprint('t', { a: 1 })).not.toBe(requestFingerprint('u', { a: 1 }));
  });
});
