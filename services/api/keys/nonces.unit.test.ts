import { parseSiweMessage, validateSiweMessage } from 'viem/siwe';
import { describe, expect, it } from 'vitest';
import { createMemoryCache } from '../../../adapters/cache/memory.ts';
import { consumeNonce, issueNonce, newNonce, restoreNonce } from './nonces.ts';

/** Every 16-character piece of `nonce`, at every offset. */
const pieces = (nonce: string): string[] =>
  Array.from({ length: nonce.length - 15 }, (_, i) => nonce.slice(i, i + 16));

describe('sign-in nonces', () => {
  it('are unpredictable: no 16-character piece of one nonce turns up in another, at any offset', async () => {
    const cache = createMemoryCache();
    const nonces: string[] = [];
    for (let i = 0; i < 300; i++) nonces.push((await issueNonce(cache, 60_000)).nonce);
    expect(new Set(nonces).size).toBe(nonces.length);
    // viem's generateSiweNonce slid a window over one Math.random buffer: each nonce was the
    // previous one shifted left by one character plus one new character.
    const seen = new Map<string, number>();
    for (const [index, nonce] of nonces.entries()) {
      for (const piece of new Set(pieces(nonce))) {
        expect(
          seen.get(piece),
          `nonce ${index} shares "${piece}" with nonce ${seen.get(piece)}`,
        ).toBeUndefined();
        seen.set(piece, index);
      }
    }
  });

  it('are 32 hex characters, which an EIP-4361 message parses and validates', () => {
    const nonce = newNonce();
    expect(nonce).toMatch(/^[0-9a-f]{32}$/);
    const message = [
      'signals.test wants you to sign in with your Ethereum account:',
      '0x0000000000000000000000000000000000000001',
      '',
      'Sign in.',
      '',
      'URI: https://signals.test/',
      'Version: 1',
      'Chain ID: 8453',
      `Nonce: ${nonce}`,
      `Issued At: ${new Date().toISOString()}`,
    ].join('\n');
    const parsed = parseSiweMessage(message);
    expect(parsed.nonce).toBe(nonce);
    expect(validateSiweMessage({ message: parsed, domain: 'signals.test', nonce })).toBe(true);
  });

  it('are single-use', async () => {
    const cache = createMemoryCache();
    const { nonce } = await issueNonce(cache, 60_000);
    expect(await consumeNonce(cache, nonce, 60_000)).toBe(true);
    expect(await consumeNonce(cache, nonce, 60_000)).toBe(false);
    expect(await consumeNonce(cache, newNonce(), 60_000)).toBe(false);
  });

  it('can be given back once consumed, usable once more and no longer than they had', async () => {
    const cache = createMemoryCache();
    const { nonce } = await issueNonce(cache, 60_000);
    expect(await consumeNonce(cache, nonce, 60_000)).toBe(true);
    await restoreNonce(cache, nonce);
    expect(await consumeNonce(cache, nonce, 60_000)).toBe(true);
    expect(await consumeNonce(cache, nonce, 60_000)).toBe(false);
    // A nonce whose own lifetime is over stays spent.
    const brief = await issueNonce(cache, 200);
    expect(await consumeNonce(cache, brief.nonce, 60_000)).toBe(true);
    while (Date.now() <= brief.expiresAt) await new Promise((r) => setTimeout(r, 2));
    await restoreNonce(cache, brief.nonce);
    expect(await consumeNonce(cache, brief.nonce, 60_000)).toBe(false);
  });
});
