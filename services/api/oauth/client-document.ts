import { lookup } from 'node:dns/promises';
import ipaddr from 'ipaddr.js';

/**
 * Whether the authorization server may fetch a client ID metadata document from this URL: only
 * when every address its host resolves to is a public unicast one. A client_id is chosen by
 * whoever starts an authorization request, so without this check anyone could make the server
 * GET an address on its own network (loopback, private, link-local, metadata services).
 */
export async function clientDocumentFetchAllowed(
  clientId: string,
  resolve: (host: string) => Promise<string[]> = async (host) =>
    (await lookup(host, { all: true, verbatim: true })).map((a) => a.address),
): Promise<boolean> {
  let host: string;
  try {
    host = new URL(clientId).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return false;
  }
  let addresses: string[];
  try {
    addresses = ipaddr.isValid(host) ? [host] : await resolve(host);
  } catch {
    return false;
  }
  return addresses.length > 0 && addresses.every((address) => ipaddr.process(address).range() === 'unicast');
}
