import { getAddress, verifyMessage } from 'viem';
import { parseSiweMessage, validateSiweMessage } from 'viem/siwe';
import type { ErrorCode } from '../../../contracts/errors.ts';
import { LOOPBACK_HOSTS } from '../../shared/ssrf/address-policy.ts';

/** Each a code of the error catalog, which gives its status. */
export type SignInRefusal = Extract<
  ErrorCode,
  | 'INVALID_SIWE_MESSAGE'
  | 'SIWE_DOMAIN_MISMATCH'
  | 'SIWE_EXPIRED'
  | 'SIWE_NOT_YET_VALID'
  | 'SIWE_SIGNATURE_INVALID'
>;

export type SignInCheck =
  | { ok: true; address: `0x${string}`; nonce: string }
  | { ok: false; code: SignInRefusal; message: string };

/**
 * The origins a message's `uri` may have: the service's public origin. It is PUBLIC_BASE_URL's
 * origin when the sign-in domain is that URL's host (the default); otherwise `https://<domain>`,
 * and `http://<domain>` too on a loopback host (a service on this machine, no PUBLIC_BASE_URL).
 */
export function siweOrigins(domain: string, publicBaseUrl?: string): string[] {
  const base = publicBaseUrl === undefined ? null : URL.parse(publicBaseUrl);
  if (base !== null && base.host === domain) return [base.origin];
  const url = URL.parse(`https://${domain}`);
  if (url === null) return [];
  return LOOPBACK_HOSTS.has(url.hostname) ? [url.origin, `http://${url.host}`] : [url.origin];
}

/**
 * Whether a message's `uri` names this service: one of its origins, or, for a service signing in
 * on a loopback domain (one on this machine), any loopback origin (localhost and 127.0.0.1 are
 * the same machine, and a test's port is its own). The chain id is not judged: the signature is
 * recovered locally whatever the chain, and the consent page signs with the chain the wallet is
 * on.
 */
function uriAllowed(uri: string, domain: string, origins: readonly string[]): boolean {
  const url = URL.parse(uri);
  if (url === null) return false;
  if (origins.includes(url.origin)) return true;
  const local = URL.parse(`http://${domain}`);
  return (
    local !== null &&
    LOOPBACK_HOSTS.has(local.hostname) &&
    LOOPBACK_HOSTS.has(url.hostname) &&
    (url.protocol === 'http:' || url.protocol === 'https:')
  );
}

/**
 * Checks a Sign-In with Ethereum (EIP-4361) message and its signature, everything except the
 * nonce's freshness (which needs the cache). Each refusal names its reason. The signature is
 * recovered locally (an externally owned account); no chain is consulted.
 */
export async function checkSignIn(input: {
  message: string;
  signature: `0x${string}`;
  domain: string;
  /** The origins the message's uri may have (`siweOrigins`). */
  origins: readonly string[];
  now: Date;
}): Promise<SignInCheck> {
  const parsed = parseSiweMessage(input.message);
  if (
    !parsed.address ||
    !parsed.domain ||
    !parsed.nonce ||
    !parsed.uri ||
    !parsed.version ||
    !parsed.chainId
  ) {
    return {
      ok: false,
      code: 'INVALID_SIWE_MESSAGE',
      message: 'not an EIP-4361 message (address, domain, uri, version, chain id and nonce are required)',
    };
  }
  if (parsed.domain !== input.domain) {
    return {
      ok: false,
      code: 'SIWE_DOMAIN_MISMATCH',
      message: `the message is for ${parsed.domain}, this service signs in ${input.domain}`,
    };
  }
  if (!uriAllowed(parsed.uri, input.domain, input.origins)) {
    return {
      ok: false,
      code: 'INVALID_SIWE_MESSAGE',
      message: `the message's uri is ${parsed.uri}; this service signs in at ${input.origins.join(' or ')}`,
    };
  }
  if (parsed.expirationTime && !(input.now < parsed.expirationTime)) {
    return { ok: false, code: 'SIWE_EXPIRED', message: 'the message expired; sign a new one' };
  }
  if (parsed.notBefore && input.now < parsed.notBefore) {
    return {
      ok: false,
      code: 'SIWE_NOT_YET_VALID',
      message: 'the message is not valid yet (not-before is in the future)',
    };
  }
  if (!validateSiweMessage({ message: parsed, domain: input.domain, time: input.now })) {
    return {
      ok: false,
      code: 'INVALID_SIWE_MESSAGE',
      message: 'the message does not follow EIP-4361 (version 1, alphanumeric nonce of 8+)',
    };
  }
  let valid = false;
  try {
    valid = await verifyMessage({
      address: parsed.address,
      message: input.message,
      signature: input.signature,
    });
  } catch {
    valid = false;
  }
  if (!valid) {
    return {
      ok: false,
      code: 'SIWE_SIGNATURE_INVALID',
      message: 'the signature was not made by the address in the message',
    };
  }
  return { ok: true, address: getAddress(parsed.address), nonce: parsed.nonce };
}
