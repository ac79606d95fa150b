import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isErrorCode } from '../../contracts/errors.ts';
import {
  FACILITATOR_REASONS,
  NONCE_ALREADY_USED,
  REFUSED_BEFORE_SENDING,
  TRANSACTION_FAILED,
} from './reasons.ts';

/** The reason strings @x402/evm's exact facilitator answers with (its errors.ts, not exported). */
function x402EvmReasons(): Set<string> {
  const dist = dirname(fileURLToPath(import.meta.resolve('@x402/evm')));
  const reasons = new Set<string>();
  for (const file of readdirSync(dist).filter((name) => name.endsWith('.mjs'))) {
    const text = readFileSync(join(dist, file), 'utf8');
    for (const [, reason] of text.matchAll(/^var Err\w+ = "([a-z0-9_]+)";$/gm)) reasons.add(reason!);
  }
  return reasons;
}

describe('the facilitators’ reasons', () => {
  it('each is spelt as @x402/evm answers it; a catalogued one is in FACILITATOR_REASONS', () => {
    const library = x402EvmReasons();
    expect(library.size).toBeGreaterThan(20);
    for (const reason of [...FACILITATOR_REASONS, ...REFUSED_BEFORE_SENDING]) {
      expect(library, reason).toContain(reason);
      if (isErrorCode(reason)) expect(FACILITATOR_REASONS, reason).toContain(reason);
    }
  });

  it('a failed transaction and a used authorisation are not refusals before sending', () => {
    expect(REFUSED_BEFORE_SENDING.has(TRANSACTION_FAILED)).toBe(false);
    expect(REFUSED_BEFORE_SENDING.has(NONCE_ALREADY_USED)).toBe(false);
    expect(REFUSED_BEFORE_SENDING.size).toBe(FACILITATOR_REASONS.length - 2 + 8);
  });
});
