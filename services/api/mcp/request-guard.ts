/**
 * DNS-rebinding guard and CORS decisions, pure. A page on an attacker's domain that resolves to
 * this host still sends its own Host and Origin, so both are checked against allow-lists.
 */

import { splitList } from '../../../contracts/setting-lists.ts';
import { RATE_LIMIT_EXPOSED_HEADERS } from '../../metering/rate-limit.ts';

export interface GuardConfig {
  /** Host names (no port); `*` allows any. */
  allowedHosts: string[];
  /** Full origins (scheme://host[:port]); `*` allows any. */
  allowedOrigins: string[];
  /**
   * Whether a page served from this machine (http://localhost:<any port>, 127.0.0.1, [::1]) may
   * call: on outside production while ALLOWED_ORIGINS is empty, so a browser MCP client (an
   * inspector, a local web app) works on the embedded defaults. The Host check still applies,
   * so a rebinding attacker's page, which sends its own Origin, is refused either way.
   */
  allowLocalOrigins?: boolean;
}

const LOCAL_ORIGIN = /^https?:\/\/(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$/;

/** ALLOWED_HOSTS and ALLOWED_ORIGINS as the guard compares them: host names and origins are case-blind. */
function parseList(raw: string): string[] {
  return splitList(raw).map((entry) => entry.toLowerCase());
}

export function guardConfig(config: {
  ALLOWED_HOSTS: string;
  ALLOWED_ORIGINS: string;
  NODE_ENV?: string;
}): GuardConfig {
  const allowedOrigins = parseList(config.ALLOWED_ORIGINS);
  return {
    allowedHosts: parseList(config.ALLOWED_HOSTS),
    allowedOrigins,
    allowLocalOrigins: allowedOrigins.length === 0 && config.NODE_ENV !== 'production',
  };
}

/** The host name of a Host header, without the port (IPv6 literals keep their brackets). */
function hostName(host: string): string {
  const lower = host.trim().toLowerCase();
  if (lower.startsWith('[')) {
    const end = lower.indexOf(']');
    return end === -1 ? lower : lower.slice(0, end + 1);
  }
  const colon = lower.indexOf(':');
  return colon === -1 ? lower : lower.slice(0, colon);
}

export function hostAllowed(guard: GuardConfig, host: string | undefined): boolean {
  if (guard.allowedHosts.includes('*')) return true;
  if (host === undefined || host === '') return false;
  return guard.allowedHosts.includes(hostName(host));
}

/**
 * Refused Host names logged within the last minute, each with when, oldest first: one line a minute
 * per name, and at most REFUSED_HOSTS_PER_MINUTE names a minute however many are made up.
 */
const refusedHostsLogged = new Map<string, number>();
const REFUSED_HOST_LOG_MS = 60_000;
const REFUSED_HOSTS_PER_MINUTE = 1_000;

/**
 * Logs a Host the guard refused, once a minute per name, naming the setting: the client hears only
 * 403 `Host not allowed`, and a service put behind a new name without ALLOWED_HOSTS refuses every
 * MCP call and free-key sign-in while its own log said nothing but `statusCode: 403`.
 */
export function logRefusedHost(
  log: { warn(obj: object, msg: string): void },
  host: string | undefined,
): void {
  const name = host === undefined || host === '' ? '(none)' : hostName(host);
  const now = Date.now();
  const last = refusedHostsLogged.get(name);
  if (last !== undefined && now - last < REFUSED_HOST_LOG_MS) return;
  // Names logged over a minute ago leave (the map is in logging order); a flood of made-up names
  // past the bound in one minute is not logged, rather than emptying the map and logging on.
  for (const [logged, at] of refusedHostsLogged) {
    if (now - at < REFUSED_HOST_LOG_MS) break;
    refusedHostsLogged.delete(logged);
  }
  if (refusedHostsLogged.size >= REFUSED_HOSTS_PER_MINUTE) return;
  refusedHostsLogged.delete(name);
  refusedHostsLogged.set(name, now);
  log.warn(
    { host: name },
    `request refused 403 'Host not allowed': Host ${name} is not in ALLOWED_HOSTS (the DNS-rebinding guard of /mcp and /api/keys); if this service is reached by that name, add it to ALLOWED_HOSTS`,
  );
}

/** Requests without an Origin (non-browser clients) pass; a browser origin must be listed. */
export function originAllowed(guard: GuardConfig, origin: string | undefined): boolean {
  if (origin === undefined) return true;
  if (guard.allowedOrigins.includes('*')) return true;
  const normalised = origin.trim().toLowerCase();
  if (guard.allowLocalOrigins && LOCAL_ORIGIN.test(normalised)) return true;
  return guard.allowedOrigins.includes(normalised);
}

const CORS_ALLOW_HEADERS =
  'Content-Type, Accept, Authorization, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID';
// The rate limit's headers too: a browser host reads how much is left, and when to retry a 429.
const CORS_EXPOSE_HEADERS = `Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, ${RATE_LIMIT_EXPOSED_HEADERS}`;

/** Headers that let a listed browser origin read the response (and the session id). */
export function corsHeaders(origin: string | undefined, methods: string): Record<string, string> {
  if (origin === undefined) return {};
  return {
    'access-control-allow-origin': origin,
    vary: 'Origin',
    'access-control-allow-methods': methods,
    'access-control-allow-headers': CORS_ALLOW_HEADERS,
    'access-control-expose-headers': CORS_EXPOSE_HEADERS,
    'access-control-max-age': '600',
  };
}
