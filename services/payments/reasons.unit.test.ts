import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { describe, expect, it } from 'vitest';
import { isErrorCode } from '../../contracts/errors.ts';
import type { DecodedPayment } from './codecs.ts';
import {
  describeMismatch,
  FACILITATOR_REASONS,
  factsReason,
  NONCE_ALREADY_USED,
  REFUSED_BEFORE_SENDING,
  revertReason,
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

describe('a v2 payment whose echoed quote matches none of this request’s', () => {
  const quoted: PaymentRequirements = {
    scheme: 'exact',
    network: 'eip155:8453',
    asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    amount: '20000',
    payTo: '0x17AF4a00D5960049EBe9c60Eaccce1bff156a747',
    maxTimeoutSeconds: 120,
    extra: { name: 'USD Coin', version: '2' },
  };
  const echoing = (accepted: Record<string, unknown>): DecodedPayment => ({
    version: 2,
    payload: { x402Version: 2, accepted, payload: {} } as unknown as PaymentPayload,
    eip3009: {} as DecodedPayment['eip3009'],
  });
  const { extra: _extra, ...withoutExtra } = quoted;

  it.each([
    [
      'payTo in lower case',
      { ...quoted, payTo: quoted.payTo.toLowerCase() },
      `accepted.payTo "${quoted.payTo.toLowerCase()}" is the quote's "${quoted.payTo}" in another letter case`,
    ],
    [
      'asset in lower case',
      { ...quoted, asset: quoted.asset.toLowerCase() },
      `accepted.asset "${quoted.asset.toLowerCase()}" is the quote's "${quoted.asset}" in another letter case`,
    ],
    [
      'another timeout',
      { ...quoted, maxTimeoutSeconds: 9999 },
      "accepted.maxTimeoutSeconds 9999 is not the quote's 120",
    ],
    [
      'another token name',
      { ...quoted, extra: { name: 'USDC', version: '2' } },
      'accepted.extra.name "USDC" is not the quote\'s "USD Coin"',
    ],
    [
      'extra left out',
      { ...withoutExtra, extra: {} },
      'accepted.extra.name is missing (the quote\'s is "USD Coin")',
    ],
  ])('%s: terms_mismatch names the field', (_name, accepted, detail) => {
    expect(describeMismatch(echoing(accepted), [quoted])).toEqual({
      reason: 'terms_mismatch',
      message: `the accepted payment terms differ from the quote of this request: ${detail}; send this request's quote back unchanged`,
    });
  });
});

describe('a simulated transfer that reverted, named as the in-process facilitator names it', () => {
  it.each([
    ['FiatTokenV2: authorization is not yet valid', 'invalid_exact_evm_payload_authorization_valid_after'],
    ['FiatTokenV2: authorization is expired', 'invalid_exact_evm_payload_authorization_valid_before'],
    ['FiatTokenV2: authorization is used or canceled', 'invalid_exact_evm_nonce_already_used'],
    ['ERC20: transfer amount exceeds balance', 'invalid_exact_evm_insufficient_balance'],
    ['FiatTokenV2: invalid signature', 'invalid_exact_evm_signature'],
    [
      'reverted with the custom error AuthorizationNotYetValid()',
      'invalid_exact_evm_payload_authorization_valid_after',
    ],
    ['Blacklistable: account is blacklisted', null],
    [undefined, null],
  ])('from the revert quoted (%s)', (quoted, reason) => {
    expect(revertReason(quoted)).toBe(reason);
  });

  const auth = { validAfter: '100', validBefore: '200' };
  const facts = { balance: 20_000n, used: false, chainTime: 150n };
  it.each([
    [
      'validAfter not before the chain time',
      { chainTime: 100n },
      'invalid_exact_evm_payload_authorization_valid_after',
    ],
    ['validBefore reached', { chainTime: 200n }, 'invalid_exact_evm_payload_authorization_valid_before'],
    ['nonce used', { used: true }, 'invalid_exact_evm_nonce_already_used'],
    ['balance below the price', { balance: 19_999n }, 'invalid_exact_evm_insufficient_balance'],
    ['nothing wrong', {}, null],
    ['nothing read', { balance: null, used: null, chainTime: null }, null],
  ])('from the chain facts: %s', (_name, changed, reason) => {
    expect(factsReason(auth, '20000', { ...facts, ...changed })).toBe(reason);
  });
});
