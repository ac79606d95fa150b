import ipaddr from 'ipaddr.js';

/**
 * Which IP addresses a webhook may reach: public unicast only. Anything ipaddr.js does not call
 * `unicast` is refused: loopback, private, link-local (169.254.169.254), CGNAT, benchmarking,
 * documentation, multicast, broadcast, reserved (240/4), unique-local, NAT64, 6to4, Teredo and
 * the rest. IPv4-mapped IPv6 is judged by the IPv4 address inside it.
 */

export type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

export interface AddressPolicy {
  /** Ranges allowed despite the rules (the test-only loopback allow-list); empty in production. */
  allow: Cidr[];
}

export const STRICT_POLICY: AddressPolicy = { allow: [] };

export function parseCidrList(raw: string): Cidr[] {
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) =>
      s.includes('/')
        ? ipaddr.parseCIDR(s)
        : ipaddr.parseCIDR(`${s}/${ipaddr.parse(s).kind() === 'ipv4' ? 32 : 128}`),
    );
}

/** Strips IPv6 brackets; the rest when it is an IP literal in any spelling ipaddr.js reads, else null. */
export function ipLiteral(host: string): string | null {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return ipaddr.isValid(bare) ? bare : null;
}

function normalise(address: string): ipaddr.IPv4 | ipaddr.IPv6 {
  const parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    return (parsed as ipaddr.IPv6).toIPv4Address();
  }
  return parsed;
}

/** Why the address is refused, or null when a webhook may connect to it. */
export function forbiddenAddress(address: string, policy: AddressPolicy = STRICT_POLICY): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = normalise(address);
  } catch {
    return `"${address}" is not an IP address`;
  }
  for (const [range, bits] of policy.allow) {
    if (range.kind() === ip.kind() && ip.match(range, bits)) return null;
  }
  const range = ip.range();
  return range === 'unicast' ? null : `${ip.toString()} is a ${range} address`;
}
