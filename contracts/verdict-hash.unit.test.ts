import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.ts';
import type { EventData } from './events.ts';
import { type VerdictContent, verdictHash, verifyVerdictChain } from './verdict-hash.ts';

function chain(n: number): EventData<'VerdictRecorded'>[] {
  const out: EventData<'VerdictRecorded'>[] = [];
  let prev: string | null = null;
  for (let i = 0; i < n; i++) {
    const content: VerdictContent = {
      exchange: 'BINANCE',
      coin: 'BTC',
      timeframe: '1h',
      call: i % 2 ? 'BUY' : 'HOLD',
      confidence: 50 + i,
      score: 0.1 * i,
      regime: 'ranging',
      price: 60_000 + i,
      candleCloseTime: 1_726_275_600_000 + i * 3_600_000,
      feed: 'replay',
      engineVersion: 'test',
      inputs: { rsi: 50 + i },
      prevHash: prev,
      trigger: 'schedule',
    };
    const hash = verdictHash(content);
    out.push({ ...content, hash });
    prev = hash;
  }
  return out;
}

describe('verdict hash chain', () => {
  it('canonical JSON ignores key order', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null } })).toBe(
      canonicalJson({ a: { c: null, d: [1, { y: 2, z: 1 }] }, b: 1 }),
    );
  });

  it('verifies an intact chain', () => {
    expect(verifyVerdictChain(chain(5))).toEqual({ ok: true });
  });

  it('detects a rewritten verdict', () => {
    const c = chain(5);
    c[2] = { ...c[2]!, call: 'SELL' };
    expect(verifyVerdictChain(c)).toEqual({ ok: false, index: 2, reason: 'hash does not match the content' });
  });

  it('detects a re-hashed forgery by the broken link after it', () => {
    const c = chain(5);
    const { hash: _old, ...content } = { ...c[2]!, call: 'SELL' as const };
    c[2] = { ...content, hash: verdictHash(content) };
    expect(verifyVerdictChain(c)).toMatchObject({ ok: false, index: 3 });
  });

  it('detects a removed verdict', () => {
    const c = chain(5);
    c.splice(1, 1);
    expect(verifyVerdictChain(c)).toMatchObject({ ok: false, index: 1 });
  });
});
