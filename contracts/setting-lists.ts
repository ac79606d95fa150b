import ipaddr from 'ipaddr.js';
import { EVENT_TYPES, type EventType, isEventType } from './events.ts';

/**
 * The parsers of the list settings, one each: the configuration's check (contracts/config.ts)
 * and the code that reads the value at run time (the Host/Origin guard, the webhook SSRF policy
 * and retry schedule, the relay's event types, the OAuth cookie keys) call the same one, so a
 * value the check passes is the value that runs.
 */

/** A comma-separated setting's entries, each trimmed, the empty ones dropped (`a, ,b,` is `a`, `b`). */
export function splitList(raw: string): string[] {
  return raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
}

/**
 * A list setting's entries (splitList), refusing a value that names none: only commas and blanks
 * (`,`, ` `). loadConfig reads an empty value as unset, so the default runs; `,` or ` ` would run
 * as a list of no entry, which is rarely meant (ALLOWED_HOSTS=, would refuse every /mcp request
 * 403, SCHEDULE_TIMEFRAMES=" " would schedule nothing). Every list setting of contracts/config.ts
 * is checked by it. Throws `names no <entry>: <instead>`, `instead` saying how to get the default
 * (unset it) or, where a list of none means something, how to say that.
 */
export function parseList(raw: string, entry: string, instead: string): string[] {
  const entries = splitList(raw);
  if (entries.length === 0) throw new Error(`names no ${entry}: ${instead}`);
  return entries;
}

/** Which ports a webhook URL may name (WEBHOOK_ALLOWED_PORTS). */
export type PortPolicy = (port: number) => boolean;

/**
 * `443`, `443,8443`, `1024-65535`, or `*` for any, split as every list setting (splitList); throws
 * naming the first part that is no port or range, or on a list of none.
 */
export function parsePortPolicy(raw: string): PortPolicy {
  const spec = raw.trim();
  if (spec === '*') return () => true;
  const parts = splitList(spec);
  if (parts.length === 0) throw new Error('no port or port range');
  const ranges = parts.map((part) => {
    const [, from, to = from] = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(part) ?? [];
    const lo = Number(from);
    const hi = Number(to);
    if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo < 1 || hi > 65_535 || lo > hi) {
      throw new Error(`invalid port or port range "${part}"`);
    }
    return [lo, hi] as const;
  });
  return (port) => ranges.some(([lo, hi]) => port >= lo && port <= hi);
}

/** An address range: its first address and prefix length. */
export type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

/**
 * Addresses and CIDRs, comma-separated (WEBHOOK_TEST_ALLOW_CIDRS, TRUST_PROXY's list), split as
 * every list setting (splitList); an address alone is its /32 or /128, an IPv4 one written as four
 * decimal parts (ipaddr.js would read `1` as 0.0.0.1 and `10.1` as 10.0.0.1, so a hop count with a
 * stray comma, `1,`, would pass as an address). Throws on an entry that is neither.
 */
export function parseCidrList(raw: string): Cidr[] {
  return splitList(raw).map((entry) => {
    const address = entry.split('/')[0]!;
    const ip = ipaddr.parse(address);
    if (ip.kind() === 'ipv4' && !ipaddr.IPv4.isValidFourPartDecimal(address)) {
      throw new Error(`${address} is no IPv4 address of four decimal parts`);
    }
    return ipaddr.parseCIDR(entry.includes('/') ? entry : `${entry}/${ip.kind() === 'ipv4' ? 32 : 128}`);
  });
}

/**
 * The longest wait a timer (setTimeout, setInterval) or PostgreSQL's statement_timeout takes:
 * 2^31 - 1 ms, about 24.8 days. Node fires a longer timer after 1 ms, with only a
 * TimeoutOverflowWarning, so every setting that becomes a wait is refused past it (the duration
 * settings of contracts/config.ts, parseDuration's delays).
 */
export const MAX_TIMER_MS = 2_147_483_647;
/** The refusal's words for a wait past MAX_TIMER_MS, in the unit every timer setting is written in. */
export const MAX_TIMER_TEXT = 'at most 2147483647 ms (about 24.8 days), the longest a timer can wait';

/**
 * The longest lifetime an expiry setting takes (a nonce's, a token's, a paid answer's, a rotated
 * secret's overlap): 10 years, 315360000000 ms. Such a setting reaches no timer but becomes a date,
 * now + lifetime, and a Date ends 8.64e15 ms after 1970: past it every answer stating the expiry
 * (GET /api/keys/nonce's expires_at) would be a 500, toISOString throwing RangeError. Ten years is
 * far past any lifetime the service gives (the longest default, a refresh token's, is 30 days) and
 * keeps now + lifetime a valid date for millennia; a value past it is a slip (a digit too many,
 * seconds written as ms).
 */
export const MAX_TTL_MS = 315_360_000_000;

/**
 * `ms` as a timer can wait it: 0 to MAX_TIMER_MS. For a wait computed from settings and the clock
 * (a retry's due time with its jitter, a doubled timeout), which no bound on a setting keeps within
 * a timer's range; a timer that ends early must then look again (the webhook dispatcher's wake
 * rescans and sets the next).
 */
export function timerDelay(ms: number): number {
  return Math.min(MAX_TIMER_MS, Math.max(0, ms));
}

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * A delay in ms: whole milliseconds, or a whole number of ms, s, m, h or d (`0`, `250`, `5s`, `2h`),
 * at most MAX_TIMER_MS (`25d` is refused: it becomes a timer's wait).
 */
export function parseDuration(raw: string): number {
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(raw.trim());
  if (!m)
    throw new Error(
      `"${raw.trim()}" is no delay: whole milliseconds, or a whole number with ms, s, m, h or d, such as 5s, 5m or 2h`,
    );
  const ms = Number(m[1]) * UNIT_MS[(m[2] ?? 'ms') as keyof typeof UNIT_MS];
  if (ms > MAX_TIMER_MS)
    throw new Error(
      `"${raw.trim()}" is too long a delay: at most 24d or 2147483647 ms (about 24.8 days), the longest a timer can wait`,
    );
  return ms;
}

/** WEBHOOK_RETRY_SCHEDULE's default: eight attempts over about a day. */
export const DEFAULT_RETRY_SCHEDULE = '0,5s,5m,30m,2h,5h,10h,10h';

/**
 * WEBHOOK_RETRY_SCHEDULE: the delay before each attempt (`0,5s,5m,30m`), split as every list
 * setting (parseList). The delays need no order: each counts from when the attempt before was due.
 * Throws naming the first entry that is no delay or longer than a timer waits (parseDuration), or
 * on a list of none.
 */
export function parseSchedule(raw: string): number[] {
  return parseList(raw, 'delay', `unset it for the default, ${DEFAULT_RETRY_SCHEDULE}`).map(parseDuration);
}

/**
 * RELAY_EVENT_TYPES: the event types named, split as every list setting (parseList), or null for
 * `*` (every type). A name is checked by the event catalog's own predicate (isEventType); throws
 * naming the unknown ones and listing the catalog's, or on a list of none.
 */
export function parseEventTypes(raw: string): ReadonlySet<EventType> | null {
  if (raw.trim() === '*') return null;
  const names = parseList(raw, 'event type', 'unset it for the default list, or set * for every type');
  const unknown = names.filter((name) => !isEventType(name));
  if (unknown.length > 0) {
    throw new Error(
      `names unknown event types: ${unknown.join(', ')}; the event types are ${EVENT_TYPES.join(', ')}`,
    );
  }
  return new Set(names as EventType[]);
}
