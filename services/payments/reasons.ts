import type { PaymentRequirements, VerifyResponse } from '@x402/core/types';
import { ERRORS, type ErrorCode, errorMessage, isErrorCode } from '../../contracts/errors.ts';
import type { DecodedPayment } from './codecs.ts';
import { v1NetworkName } from './rails.ts';
import { usdc } from './usdc.ts';

/**
 * @x402/evm's reason for a settlement whose transaction failed: mined and reverted when it names
 * a transaction; without one, its word for any error around the send (its transport timing out
 * after the node took the transaction included), which does not tell that nothing was sent.
 */
export const TRANSACTION_FAILED = 'invalid_exact_evm_transaction_failed' satisfies ErrorCode;

/**
 * The token refused the transfer because the authorisation was already used (paid), by whatever
 * transaction: this settlement's own among them.
 */
export const NONCE_ALREADY_USED = 'invalid_exact_evm_nonce_already_used' satisfies ErrorCode;

/** The authorisation is not valid yet: validAfter is not behind the clock, or the chain's time. */
export const VALID_AFTER = 'invalid_exact_evm_payload_authorization_valid_after' satisfies ErrorCode;

/** The simulated transfer reverted for a reason @x402/evm's diagnosis did not find. */
export const SIMULATION_FAILED = 'invalid_exact_evm_transaction_simulation_failed' satisfies ErrorCode;

/** The facilitators' reason codes that the catalog words for a caller (the rest are spelt out). */
export const FACILITATOR_REASONS = [
  'invalid_exact_evm_signature',
  'invalid_exact_evm_recipient_mismatch',
  'invalid_exact_evm_payload_authorization_valid_before',
  VALID_AFTER,
  'invalid_exact_evm_payload_authorization_value_mismatch',
  'invalid_exact_evm_authorization_value',
  'invalid_exact_evm_network_mismatch',
  NONCE_ALREADY_USED,
  'invalid_exact_evm_insufficient_balance',
  SIMULATION_FAILED,
  TRANSACTION_FAILED,
  'asset_not_deployed_contract',
] as const satisfies readonly ErrorCode[];

/**
 * @x402/evm's reasons (its exact facilitator's errors.ts, which the package does not export) that
 * the catalog has no entry for: passed on as they are, spelt out in words (describeReason).
 */
const UNCATALOGUED_REFUSALS_BEFORE_SENDING = [
  'invalid_exact_evm_scheme',
  'invalid_exact_evm_missing_eip712_domain',
  'invalid_exact_evm_token_name_mismatch',
  'invalid_exact_evm_token_version_mismatch',
  'invalid_exact_evm_eip3009_not_supported',
  'invalid_exact_evm_failed_to_parse_signature',
  'eip6492_factory_not_allowed',
  'unsupported_payload_type',
] as const;

/**
 * The facilitators' reasons that refuse a settlement before its transaction is sent: the settle's
 * own check of the authorisation, or the transfer's gas estimate naming why it would revert. All
 * the catalogued ones but TRANSACTION_FAILED and NONCE_ALREADY_USED, neither of which tells that
 * nothing was sent.
 */
export const REFUSED_BEFORE_SENDING: ReadonlySet<string> = new Set<string>([
  ...FACILITATOR_REASONS.filter((reason) => reason !== TRANSACTION_FAILED && reason !== NONCE_ALREADY_USED),
  ...UNCATALOGUED_REFUSALS_BEFORE_SENDING,
]);
const facilitatorReasons: ReadonlySet<string> = new Set(FACILITATOR_REASONS);

export function describeReason(reason: string, detail?: string): string {
  const known = isErrorCode(reason) && facilitatorReasons.has(reason);
  const words = known ? ERRORS[reason].message : reason.replaceAll('_', ' ');
  return detail && !known ? `${words}: ${detail.slice(0, 200)}` : words;
}

/** The facilitators' reasons for an authorised amount other than the quote's: v2's check and v1's. */
const VALUE_MISMATCH: ReadonlySet<string> = new Set<string>([
  'invalid_exact_evm_payload_authorization_value_mismatch',
  'invalid_exact_evm_authorization_value',
]);

/** The payer's balance of the asset is below the quoted amount. */
export const INSUFFICIENT_BALANCE = 'invalid_exact_evm_insufficient_balance' satisfies ErrorCode;

/** The authorisation's validBefore has passed (or is too close). */
const VALID_BEFORE = 'invalid_exact_evm_payload_authorization_valid_before' satisfies ErrorCode;

/**
 * The token's words for why the simulated transfer reverted, and the reason each names: FiatToken
 * v2's (Base's USDC; the test token says the same without the "FiatTokenV2: " prefix), and the
 * custom errors of newer EIP-3009 tokens. The facilitators quote the revert in their message.
 */
const REVERT_REASONS: readonly [RegExp, ErrorCode][] = [
  [/authorization is not yet valid|AuthorizationNotYetValid/i, VALID_AFTER],
  [/authorization is expired|AuthorizationExpired/i, VALID_BEFORE],
  [
    /authorization is used or canceled|AuthorizationUsedOrCanceled|AuthorizationAlreadyUsed/i,
    NONCE_ALREADY_USED,
  ],
  [/transfer amount exceeds balance|ERC20InsufficientBalance/i, INSUFFICIENT_BALANCE],
  [/invalid signature|InvalidSignature|SignerMismatch/i, 'invalid_exact_evm_signature'],
];

/** What the chain says of an authorisation, as far as it was read (null: not read, or unreadable). */
export interface ChainFacts {
  /** The payer's balance of the asset, atomic units. */
  balance: bigint | null;
  /** Whether the authorisation's nonce is used (or cancelled). */
  used: boolean | null;
  /** The latest block's time, seconds: the clock the token checks validAfter and validBefore against. */
  chainTime: bigint | null;
}

/** The reason a simulation failure's quoted revert names (nothing read), or null when it names none. */
export function revertReason(quoted: string | undefined): ErrorCode | null {
  if (quoted === undefined) return null;
  return REVERT_REASONS.find(([words]) => words.test(quoted))?.[1] ?? null;
}

/**
 * Why a simulated transfer reverted, read from the chain's facts in the token's own order of
 * checks (time window, nonce, balance); null when they tell nothing (the catch-all stands).
 */
export function factsReason(
  auth: { validAfter: string; validBefore: string },
  asked: string,
  { balance, used, chainTime }: ChainFacts,
): ErrorCode | null {
  if (chainTime !== null && BigInt(auth.validAfter) >= chainTime) return VALID_AFTER;
  if (chainTime !== null && BigInt(auth.validBefore) <= chainTime) return VALID_BEFORE;
  if (used === true) return NONCE_ALREADY_USED;
  if (balance !== null && balance < BigInt(asked)) return INSUFFICIENT_BALANCE;
  return null;
}

/**
 * What a facilitator read on the chain while refusing a payment, handed on with its answer (the
 * in-process facilitator's `reads`), so that the refusal's words reuse it rather than read it again.
 */
export interface RefusalReads {
  /** The payer's balance of the asset, as the refusal's diagnosis read it. */
  payerBalance?: bigint;
}

/**
 * A facilitator's verification answer, with what it read when it refused: the in-process one's
 * (an HTTP facilitator's never carries it: the official client's schema drops unknown fields).
 */
export type VerifyAnswer = VerifyResponse & { reads?: RefusalReads };

/** An amount in the asset's atomic units and in USDC (every rail's asset, 6 decimals). */
const amountText = (atomic: bigint): string => `${atomic} (${usdc(atomic)} USDC)`;

/** What a refused verification is about, beyond its reason: the amounts a payer must fix. */
export interface VerifyAmounts {
  /** The authorisation's value, atomic units, as signed. */
  signed: string;
  /** The quote's amount, atomic units. */
  asked: string;
  /** The payer's balance of the asset as the refusal read it; null when it could not be read. */
  held: bigint | null;
}

/**
 * A refused verification (or settlement) in words: describeReason's, and for an amount the
 * facilitators' words leave out (they name no figure), what was signed, what the quote asks and,
 * for a balance too low, what the payer holds when it could be read, so the payer knows what to
 * sign or fund.
 */
export function describeVerifyRefusal(
  reason: string,
  detail: string | undefined,
  amounts: VerifyAmounts,
): string {
  const words = describeReason(reason, detail);
  const asked = amountText(BigInt(amounts.asked));
  if (VALUE_MISMATCH.has(reason)) {
    return `${words}: signed ${amountText(BigInt(amounts.signed))}, the quote asks ${asked}; sign an authorisation for exactly the quoted amount`;
  }
  if (reason === INSUFFICIENT_BALANCE) {
    const held = amounts.held === null ? '' : `holds ${amountText(amounts.held)}, `;
    return `${words}: the payer ${held}the quote asks ${asked}`;
  }
  return words;
}

/** Why a payment matched none of this request's quoted terms, naming the first field that differs. */
export function describeMismatch(
  payment: DecodedPayment,
  requirements: PaymentRequirements[],
): { reason: ErrorCode; message: string } {
  const offered = requirements.map((r) => r.network).join(', ');
  if (payment.version === 1) {
    if (payment.scheme !== 'exact') {
      return {
        reason: 'unsupported_scheme',
        message: `scheme "${payment.scheme}" is not accepted; use "exact"`,
      };
    }
    const names = requirements.map((r) => v1NetworkName(r.network)).filter(Boolean);
    return {
      reason: 'network_mismatch',
      message: `network "${payment.network}" is not accepted here (accepted: ${names.join(', ') || 'none in v1'})`,
    };
  }
  const accepted = payment.payload.accepted;
  if (accepted.scheme !== 'exact') {
    return {
      reason: 'unsupported_scheme',
      message: `scheme "${accepted.scheme}" is not accepted; use "exact"`,
    };
  }
  const sameNetwork = requirements.filter((r) => r.network === accepted.network);
  if (sameNetwork.length === 0) {
    return {
      reason: 'network_mismatch',
      message: `network ${accepted.network} is not accepted here (accepted: ${offered})`,
    };
  }
  const sameAsset = sameNetwork.filter((r) => r.asset.toLowerCase() === accepted.asset.toLowerCase());
  if (sameAsset.length === 0) {
    return {
      reason: 'asset_mismatch',
      message: `asset ${accepted.asset} is not accepted on ${accepted.network} (accepted: ${sameNetwork.map((r) => r.asset).join(', ')})`,
    };
  }
  const quoted = sameAsset[0]!;
  if (quoted.payTo.toLowerCase() !== accepted.payTo.toLowerCase()) {
    return {
      reason: 'recipient_mismatch',
      message: `payTo ${accepted.payTo} is not the quoted recipient ${quoted.payTo}`,
    };
  }
  // An echoed quote of another amount is a payment of that amount as signed: amount_mismatch in the
  // words of every version's (describeSignedAmount). An authorisation for the price under an echo
  // changed by hand is the echo's fault: terms_mismatch names accepted.amount below.
  if (quoted.amount !== accepted.amount) {
    const signedOther = describeSignedAmount(payment, quoted);
    if (signedOther !== null) return signedOther;
  }
  const differs = firstDifference(quoted, accepted);
  return {
    reason: 'terms_mismatch',
    message: differs
      ? `${ERRORS.terms_mismatch.message}: ${differs}; send this request's quote back unchanged`
      : ERRORS.terms_mismatch.message,
  };
}

/**
 * A signed authorisation for another amount than the quote it matched, or null: amount_mismatch
 * on v1 and v2 alike, named before any facilitator is asked. A v2 payment echoes the quote's
 * amount in `accepted` (describeMismatch compares that), but the amount moved is the one signed,
 * and a v1 payment carries no other; left to the facilitators, the same mistake came back as
 * their reason for a value other than the requirement's, or as 503 where none can settle.
 */
export function describeSignedAmount(
  payment: DecodedPayment,
  quoted: PaymentRequirements,
): { reason: ErrorCode; message: string } | null {
  const signed = BigInt(payment.eip3009.authorization.value);
  const asked = BigInt(quoted.amount);
  if (signed === asked) return null;
  return {
    reason: 'amount_mismatch',
    message: errorMessage('amount_mismatch', { value: amountText(signed), price: amountText(asked) }),
  };
}

/** A value as the buyer sent it, cut short: the header may hold 12 KB. */
function shown(value: unknown): string {
  return (JSON.stringify(value) ?? 'undefined').slice(0, 100);
}

/**
 * The first field of an echoed quote entry that the resource server's match (every field equal,
 * `extra` holding the quote's) refuses, so a buyer is told what to fix: an address in another
 * letter case (a client that lowercases it), a changed timeout, a dropped or renamed `extra`.
 */
function firstDifference(quoted: PaymentRequirements, accepted: PaymentRequirements): string | null {
  const { extra: quotedExtra, ...quotedCore } = quoted as PaymentRequirements & Record<string, unknown>;
  const { extra: acceptedExtra, ...acceptedCore } = accepted as PaymentRequirements & Record<string, unknown>;
  for (const key of new Set([...Object.keys(quotedCore), ...Object.keys(acceptedCore)])) {
    const want = quotedCore[key];
    const got = acceptedCore[key];
    if (JSON.stringify(want) === JSON.stringify(got)) continue;
    const field = `accepted.${key.slice(0, 40)}`;
    if (got === undefined) return `${field} is missing (the quote's is ${shown(want)})`;
    if (want === undefined) return `${field} is not in the quote`;
    if (typeof want === 'string' && typeof got === 'string' && want.toLowerCase() === got.toLowerCase())
      return `${field} ${shown(got)} is the quote's ${shown(want)} in another letter case`;
    return `${field} ${shown(got)} is not the quote's ${shown(want)}`;
  }
  const sent = (acceptedExtra ?? {}) as Record<string, unknown>;
  for (const [key, want] of Object.entries(quotedExtra ?? {})) {
    const got = sent[key];
    if (JSON.stringify(want) === JSON.stringify(got)) continue;
    if (got === undefined) return `accepted.extra.${key} is missing (the quote's is ${shown(want)})`;
    return `accepted.extra.${key} ${shown(got)} is not the quote's ${shown(want)}`;
  }
  return null;
}

/**
 * Why a settlement refused before its transaction was sent failed: the catalog's words for a
 * reason it has, with the amounts where given (a balance that fell between verification and
 * settlement names what the payer holds, as the verification's refusal does), except
 * @x402/evm's catch-all for a send that failed, whose words ("failed on chain") would tell a
 * payer the chain saw it; the first line of what failed is named instead.
 */
export function describeUnsent(reason: string, detail?: string, amounts?: VerifyAmounts): string {
  if (reason !== TRANSACTION_FAILED) {
    return amounts ? describeVerifyRefusal(reason, detail, amounts) : describeReason(reason, detail);
  }
  const first = detail?.split('\n')[0]?.trim().slice(0, 200);
  return `the settlement transaction was not sent${first ? ` (${first})` : ''}; nothing was charged`;
}
