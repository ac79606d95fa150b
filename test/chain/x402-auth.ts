import { PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import { type Hex, toHex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { AUTHORIZATION_TYPES, BASE_USDC } from './local-chain.ts';

/**
 * ERC-3009 authorisations and x402 payment headers as a paying client builds them. Apart from
 * the x402 stack (x402-app.ts re-exports them) so that a client-only user (the fault drill) does
 * not load the whole api and engine to sign a payment.
 */

export function randomNonce(): Hex {
  return toHex(crypto.getRandomValues(new Uint8Array(32)));
}

export interface AuthorizationFields {
  from: Hex;
  to: Hex;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
}

/** Signs an ERC-3009 authorisation the way a wallet does (viem signTypedData). */
export async function signAuthorization(
  key: Hex,
  auth: AuthorizationFields,
  domain: { name?: string; version?: string; chainId?: number; verifyingContract?: Hex } = {},
): Promise<Hex> {
  return privateKeyToAccount(key).signTypedData({
    domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: BASE_USDC, ...domain },
    types: AUTHORIZATION_TYPES,
    primaryType: 'TransferWithAuthorization',
    message: auth,
  });
}

/** Signs an ERC-3009 CancelAuthorization of `nonce` the way a wallet does. */
export async function signCancellation(key: Hex, nonce: Hex): Promise<Hex> {
  const account = privateKeyToAccount(key);
  return account.signTypedData({
    domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: BASE_USDC },
    types: {
      CancelAuthorization: [
        { name: 'authorizer', type: 'address' },
        { name: 'nonce', type: 'bytes32' },
      ],
    },
    primaryType: 'CancelAuthorization',
    message: { authorizer: account.address, nonce },
  });
}

export function toBase64Json(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64');
}

export function fromBase64Json<T = Record<string, unknown>>(value: string | null): T {
  if (value === null) throw new Error('header missing');
  return JSON.parse(Buffer.from(value, 'base64').toString('utf8')) as T;
}

/** An authorisation as a payment payload carries it (amounts and times as decimal strings). */
export function authorizationJson(auth: AuthorizationFields) {
  return {
    from: auth.from,
    to: auth.to,
    value: auth.value.toString(),
    validAfter: auth.validAfter.toString(),
    validBefore: auth.validBefore.toString(),
    nonce: auth.nonce,
  };
}

/** A v1 `X-PAYMENT` header, built by hand as a v1 client does. */
export function v1Header(auth: AuthorizationFields, signature: Hex, network = 'base'): string {
  return toBase64Json({
    x402Version: 1,
    scheme: 'exact',
    network,
    payload: { signature, authorization: authorizationJson(auth) },
  });
}

/** A v2 `PAYMENT-SIGNATURE` header echoing `accepted` (the chosen quote entry). */
export function v2Header(
  accepted: Record<string, unknown>,
  auth: AuthorizationFields,
  signature: Hex,
  /** An x402 payment-identifier id to pay under (the client's idempotency key). */
  paymentId?: string,
): string {
  return toBase64Json({
    x402Version: 2,
    accepted,
    payload: { signature, authorization: authorizationJson(auth) },
    ...(paymentId
      ? { extensions: { [PAYMENT_IDENTIFIER]: { info: { required: false, id: paymentId } } } }
      : {}),
  });
}

export function nowSeconds(): bigint {
  return BigInt(Math.floor(Date.now() / 1000));
}

/** A fresh authorisation of `value` from `from` to `payTo`: valid from ten minutes ago for two more. */
export function freshAuthorization(
  payTo: Hex,
  from: Hex,
  value: bigint,
  overrides: Partial<AuthorizationFields> = {},
): AuthorizationFields {
  const now = nowSeconds();
  return {
    from,
    to: payTo,
    value,
    validAfter: now - 600n,
    validBefore: now + 120n,
    nonce: randomNonce(),
    ...overrides,
  };
}
