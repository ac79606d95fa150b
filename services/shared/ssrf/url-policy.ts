import { lookup } from 'node:dns/promises';
import type { PortPolicy } from '../../../contracts/setting-lists.ts';
import { type AddressPolicy, forbiddenAddress, ipLiteral, STRICT_POLICY } from './address-policy.ts';

export interface UrlPolicy {
  ports: PortPolicy;
  addresses: AddressPolicy;
  /** Name resolution; every address returned must pass. */
  resolve?: (host: string) => Promise<string[]>;
}

export const DEFAULT_URL_POLICY: UrlPolicy = { ports: (p) => p === 443, addresses: STRICT_POLICY };

export async function resolveAll(host: string): Promise<string[]> {
  const answers = await lookup(host, { all: true, verbatim: true });
  return answers.map((a) => a.address);
}

const INTERNAL_SUFFIXES = [
  '.localhost',
  '.localdomain',
  '.local',
  '.internal',
  '.home.arpa',
  '.lan',
  '.intranet',
  '.corp',
];

export type UrlCheck = { ok: true; url: URL } | { ok: false; reason: string };

/**
 * The registration-time check: HTTPS, no userinfo, no fragment, an allowed port, and a host that is (or
 * resolves only to) public addresses. Connect time checks the resolved address again, since
 * DNS may answer differently later (rebinding).
 */
export async function checkWebhookUrl(
  raw: string,
  policy: UrlPolicy = DEFAULT_URL_POLICY,
): Promise<UrlCheck> {
  // WHATWG parsing drops a tab or newline anywhere and control characters at either end
  // ('https://host/\u0000' reads as 'https://host/'): a URL sent with one is refused, not stored
  // as another URL than the one sent.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  if (/[\u0000-\u001f\u007f]/.test(raw))
    return { ok: false, reason: 'url must not contain control characters' };
  let url: URL;
  try {
    // WHATWG parsing also canonicalises decimal, hex and octal IPv4 spellings to dotted quads.
    url = new URL(raw);
  } catch {
    return { ok: false, reason: 'url is not a valid absolute URL' };
  }
  if (url.protocol !== 'https:') return { ok: false, reason: 'url must use https' };
  if (url.username !== '' || url.password !== '')
    return { ok: false, reason: 'url must not contain credentials' };
  // A fragment never leaves the client: stored, it would show a target the receiver never sees.
  if (url.hash !== '' || url.href.includes('#'))
    return { ok: false, reason: 'url must not contain a fragment (#…): it is never sent over HTTP' };
  const port = url.port === '' ? 443 : Number(url.port);
  if (!policy.ports(port)) return { ok: false, reason: `port ${port} is not allowed for webhooks` };
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  if (host === '') return { ok: false, reason: 'url has no host' };
  const literal = ipLiteral(host);
  if (literal !== null) {
    const why = forbiddenAddress(literal, policy.addresses);
    return why === null
      ? { ok: true, url }
      : { ok: false, reason: `url points to an internal address: ${why}` };
  }
  if (host === 'localhost' || INTERNAL_SUFFIXES.some((s) => host.endsWith(s)) || !host.includes('.')) {
    return { ok: false, reason: `url host "${host}" is an internal name` };
  }
  let addresses: string[];
  try {
    addresses = await (policy.resolve ?? resolveAll)(host);
  } catch {
    return { ok: false, reason: `url host "${host}" does not resolve` };
  }
  if (addresses.length === 0) return { ok: false, reason: `url host "${host}" does not resolve` };
  for (const address of addresses) {
    const why = forbiddenAddress(address, policy.addresses);
    if (why !== null)
      return { ok: false, reason: `url host "${host}" resolves to an internal address: ${why}` };
  }
  return { ok: true, url };
}
