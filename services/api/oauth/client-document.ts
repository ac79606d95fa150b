import { fetch as undiciFetch } from 'undici';
import {
  type AddressPolicy,
  forbiddenAddress,
  ipLiteral,
  STRICT_POLICY,
} from '../../shared/ssrf/address-policy.ts';
import { type GuardedAgentOptions, guardedAgent } from '../../shared/ssrf/guarded-agent.ts';
import { resolveAll } from '../../shared/ssrf/url-policy.ts';

/**
 * Which addresses the authorization server reaches when it fetches a client ID metadata document
 * (or any other document oidc-provider fetches): the webhook sender's policy, global unicast only
 * (services/shared/ssrf/address-policy.ts), one rule for both. A client_id is chosen by whoever
 * starts an authorization request, so without it anyone could make the server GET an address on
 * its own network (loopback, private, link-local, metadata services, IPv4 embedded in IPv6).
 */
export interface OutboundPolicy {
  addresses: AddressPolicy;
  /** Name resolution (tests answer here); every address returned must pass. */
  resolve: (host: string) => Promise<string[]>;
}

export const DEFAULT_OUTBOUND_POLICY: OutboundPolicy = { addresses: STRICT_POLICY, resolve: resolveAll };

/**
 * The early check (oidc-provider's `allowFetch`): false unless every address the host resolves to
 * passes the policy, so a private client_id is refused with a clear error before any fetch. The
 * fetch itself (`guardedFetch`) checks again the address it dials, since DNS may answer
 * differently a moment later (rebinding).
 */
export async function clientDocumentFetchAllowed(
  clientId: string,
  policy: OutboundPolicy = DEFAULT_OUTBOUND_POLICY,
): Promise<boolean> {
  let host: string;
  try {
    host = new URL(clientId).hostname.toLowerCase().replace(/\.$/, '');
  } catch {
    return false;
  }
  const literal = ipLiteral(host);
  let addresses: string[];
  try {
    addresses = literal !== null ? [literal] : await policy.resolve(host);
  } catch {
    return false;
  }
  return (
    addresses.length > 0 && addresses.every((address) => forbiddenAddress(address, policy.addresses) === null)
  );
}

type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** A guarded fetch and the one agent behind it: `close` ends its keep-alive sockets (at shutdown). */
export interface GuardedFetch {
  fetch: Fetch;
  close(): Promise<void>;
}

/**
 * oidc-provider's `fetch`: every request it makes goes through the webhook sender's guarded
 * agent, which resolves the name itself, checks every address and dials the one it checked (a
 * rebinding name cannot switch to an internal address between check and connect). Redirects are
 * not followed (oidc-provider asks for `redirect: 'manual'`, and the agent does not follow them).
 * The agent keeps sockets alive: whoever builds it closes it when its provider stops.
 */
export function guardedFetch(
  policy: OutboundPolicy = DEFAULT_OUTBOUND_POLICY,
  tls?: GuardedAgentOptions['tls'],
): GuardedFetch {
  const agent = guardedAgent({
    addresses: policy.addresses,
    resolve: policy.resolve,
    connectTimeoutMs: 2_500,
    connectionsPerOrigin: 4,
    ...(tls ? { tls } : {}),
  });
  let closing: Promise<void> | null = null;
  return {
    fetch: (input, init) => {
      const { dispatcher: _theirs, ...rest } = (init ?? {}) as RequestInit & { dispatcher?: unknown };
      return undiciFetch(input as never, {
        ...(rest as object),
        dispatcher: agent,
      }) as unknown as Promise<Response>;
    },
    close: () => {
      closing ??= agent.close();
      return closing;
    },
  };
}
