import ipaddr from 'ipaddr.js';
import type { Cidr } from '../../../contracts/setting-lists.ts';

/**
 * Which IP addresses a webhook may reach: global unicast only, as an allow-rule. An address is
 * allowed only when it is positively known to be global; nothing is allowed for being absent
 * from a list of bad ranges.
 *
 * IPv4: everything except the non-global entries of IANA's IPv4 special-purpose registry (and
 * multicast, 240/4, broadcast).
 *
 * IPv6: only 2000::/3 (global unicast) is considered at all; inside it the special-purpose
 * ranges are refused (2001::/23 IETF assignments, 2001:db8::/32 and 3fff::/20 documentation).
 * Every form that embeds or translates an IPv4 address is judged by the IPv4 rule on the
 * address inside it: IPv4-compatible (::/96, so `[::127.0.0.1]` is loopback), IPv4-mapped
 * (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), NAT64 (64:ff9b::/96 and the local-use
 * 64:ff9b:1::/48 at every RFC 6052 position), 6to4 (2002::/16), Teredo (2001::/32: server and
 * client address) and ISATAP interface identifiers (…:5efe:a.b.c.d). Scoped addresses (a zone
 * id) are never global.
 */

export interface AddressPolicy {
  /** Ranges allowed despite the rules (the test-only loopback allow-list); empty in production. */
  allow: Cidr[];
}

export const STRICT_POLICY: AddressPolicy = { allow: [] };

/**
 * The loopback host names as `URL.hostname` spells them: where a plain-http URL is accepted (an
 * OAuth redirect URI, OAuth 2.1 §2.3.1; a SIWE origin on this machine). Names only: any other
 * spelling of a loopback address (127.0.0.2, [::ffff:127.0.0.1]) is not on it.
 */
export const LOOPBACK_HOSTS: ReadonlySet<string> = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Strips IPv6 brackets; the rest when it is an IP literal in any spelling ipaddr.js reads, else null. */
export function ipLiteral(host: string): string | null {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return ipaddr.isValid(bare) ? bare : null;
}

/** IANA IPv4 special-purpose registry, non-global entries (plus multicast and 240/4). */
const IPV4_NOT_GLOBAL: [string, number, string][] = [
  ['0.0.0.0', 8, '"this network"'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared (CGNAT)'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignment'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, '6to4 relay anycast'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];
const IPV4_RANGES = IPV4_NOT_GLOBAL.map(([a, bits, label]) => ({
  range: ipaddr.IPv4.parse(a),
  bits,
  label,
}));

/** Special-purpose ranges inside 2000::/3 that are not embeddings (those are judged by IPv4). */
const IPV6_NOT_GLOBAL: [string, number, string][] = [
  ['2001:db8::', 32, 'documentation'],
  ['3fff::', 20, 'documentation'],
  ['2001::', 23, 'IETF protocol assignment'],
];
const GLOBAL_UNICAST = ipaddr.IPv6.parse('2000::');
const IPV6_RANGES = IPV6_NOT_GLOBAL.map(([a, bits, label]) => ({
  range: ipaddr.IPv6.parse(a),
  bits,
  label,
}));

function v4(a: number, b: number, c: number, d: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([a & 0xff, b & 0xff, c & 0xff, d & 0xff]);
}

/** The IPv4 address in words[i], words[i+1] of an IPv6 address. */
function v4At(w: number[], i: number): ipaddr.IPv4 {
  return v4(w[i]! >> 8, w[i]!, w[i + 1]! >> 8, w[i + 1]!);
}

/** RFC 6052 prefix lengths that fit inside the local-use NAT64 prefix 64:ff9b:1::/48. */
const LOCAL_USE_PREFIXES = [48, 56, 64, 96] as const;

/**
 * The IPv4 addresses a local-use NAT64 address (64:ff9b:1::/48) translates to. The operator
 * picks the prefix length inside the /48, which the address does not say, so every RFC 6052
 * position is read (the IPv4 bytes start after the prefix and skip byte 8, the u octet) and all
 * must be global. Readings in 0.0.0.0/8 are left out when another reading is not: that is the
 * zero padding of the other layouts (`64:ff9b:1::808:808` is 8.8.8.8 at /96, 0.0.0.0 at /48), and
 * no translator sends packets to a 0/8 destination.
 */
function localUseNat64(ip: ipaddr.IPv6): { form: string; ipv4: ipaddr.IPv4 }[] {
  const bytes = ip.toByteArray();
  const readings = LOCAL_USE_PREFIXES.map((bits) => {
    const at = [...Array(16).keys()].filter((i) => i >= bits / 8 && (bits === 96 || i !== 8)).slice(0, 4);
    const [a, b, c, d] = at.map((i) => bytes[i]!) as [number, number, number, number];
    return { form: `NAT64 local-use (/${bits})`, ipv4: v4(a, b, c, d) };
  });
  const meaningful = readings.filter((r) => r.ipv4.octets[0] !== 0);
  return meaningful.length > 0 ? meaningful : readings.slice(-1);
}

/** Why an IPv4 address is not global, or null when it is. */
function ipv4Refusal(ip: ipaddr.IPv4): string | null {
  if (ip.toString() === '255.255.255.255') return 'broadcast';
  for (const { range, bits, label } of IPV4_RANGES) if (ip.match(range, bits)) return label;
  return null;
}

/**
 * IPv4 addresses an IPv6 address embeds or translates to, with the form's name; empty when it
 * embeds none.
 */
export function embeddedIpv4(ip: ipaddr.IPv6): { form: string; ipv4: ipaddr.IPv4 }[] {
  const w = ip.parts;
  const zero = (from: number, to: number) => w.slice(from, to).every((x) => x === 0);
  const found: { form: string; ipv4: ipaddr.IPv4 }[] = [];
  if (zero(0, 6)) found.push({ form: 'IPv4-compatible', ipv4: v4At(w, 6) });
  if (zero(0, 5) && w[5] === 0xffff) found.push({ form: 'IPv4-mapped', ipv4: v4At(w, 6) });
  if (zero(0, 4) && w[4] === 0xffff && w[5] === 0) found.push({ form: 'IPv4-translated', ipv4: v4At(w, 6) });
  if (w[0] === 0x64 && w[1] === 0xff9b && zero(2, 6)) found.push({ form: 'NAT64', ipv4: v4At(w, 6) });
  if (w[0] === 0x64 && w[1] === 0xff9b && w[2] === 1) found.push(...localUseNat64(ip));
  if (w[0] === 0x2002) found.push({ form: '6to4', ipv4: v4At(w, 1) });
  if (w[0] === 0x2001 && w[1] === 0) {
    found.push({ form: 'Teredo server', ipv4: v4At(w, 2) });
    found.push({ form: 'Teredo client', ipv4: v4(~w[6]! >> 8, ~w[6]!, ~w[7]! >> 8, ~w[7]!) });
  }
  // ISATAP interface identifier (any prefix): 0000:5efe or 0200:5efe (u/g bits may be set).
  if ((w[4]! & 0xfcff) === 0 && w[5] === 0x5efe) found.push({ form: 'ISATAP', ipv4: v4At(w, 6) });
  return found;
}

function ipv6Refusal(ip: ipaddr.IPv6): string | null {
  if (ip.zoneId) return `${ip.toString()} is a scoped address (zone id)`;
  // Inside ::/96 but not IPv4-compatible forms: named for what they are, not as 0.0.0.0/0.0.0.1.
  const range = ip.range();
  if (range === 'loopback') return `${ip.toString()} is the IPv6 loopback address`;
  if (range === 'unspecified') return `${ip.toString()} is the IPv6 unspecified address`;
  const embedded = embeddedIpv4(ip);
  for (const { form, ipv4 } of embedded) {
    const why = ipv4Refusal(ipv4);
    if (why !== null) return `${ip.toString()} is ${form} for ${ipv4.toString()}, a ${why} address`;
  }
  // A whole-address embedding reaches the IPv4 address inside it, which was just found global.
  // ISATAP is only an interface identifier: its prefix must be global as well.
  if (embedded.some((e) => e.form !== 'ISATAP')) return null;
  if (!ip.match(GLOBAL_UNICAST, 3)) {
    return `${ip.toString()} is not global unicast (${range === 'unicast' ? 'outside 2000::/3' : range})`;
  }
  for (const { range, bits, label } of IPV6_RANGES) {
    if (ip.match(range, bits)) return `${ip.toString()} is a ${label} address`;
  }
  return null;
}

/**
 * `::a.b.c.d` written as `::xxxx:yyyy`: ipaddr.js reads the former as IPv4-mapped (::ffff:…),
 * which would name the wrong form in the refusal.
 */
function dottedTailToHex(address: string): string {
  const m = /^(.*:)(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(%.*)?$/.exec(address);
  if (!m) return address;
  const [a, b, c, d] = [m[2], m[3], m[4], m[5]].map(Number) as [number, number, number, number];
  if ([a, b, c, d].some((x) => x > 255)) return address;
  const hex = (hi: number, lo: number) => ((hi << 8) | lo).toString(16);
  return `${m[1]}${hex(a, b)}:${hex(c, d)}${m[6] ?? ''}`;
}

/** Why the address is refused, or null when a webhook may connect to it. */
export function forbiddenAddress(address: string, policy: AddressPolicy = STRICT_POLICY): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(dottedTailToHex(address));
  } catch {
    return `"${address}" is not an IP address`;
  }
  const mapped =
    ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()
      ? (ip as ipaddr.IPv6).toIPv4Address()
      : null;
  for (const [range, bits] of policy.allow) {
    if (range.kind() === ip.kind() && ip.match(range, bits)) return null;
    if (mapped && range.kind() === 'ipv4' && mapped.match(range, bits)) return null;
  }
  if (ip.kind() === 'ipv4') {
    const why = ipv4Refusal(ip as ipaddr.IPv4);
    return why === null ? null : `${ip.toString()} is a ${why} address`;
  }
  return ipv6Refusal(ip as ipaddr.IPv6);
}
