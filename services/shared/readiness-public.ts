import { failureReason } from './failure-reason.ts';
import type { CheckResult } from './readiness.ts';

/**
 * What /readyz shows to whoever reaches the port. A check that failed on an error carries it in
 * `cause` (and words meant for the log only in `logged`): the answer shows the reason the error's
 * code gives (refused, name not resolved, timed out, TLS certificate refused, HTTP 503...) in
 * place of `detail`, and neither the error nor its words, which name the host, address or URL.
 * A check that passes shows no such detail: its cause (a retried try that failed) goes to the log.
 * The check's name, ok and its other fields stay, so an operator still sees which part is down;
 * the words taken out go to the service log (see opsRoutes), once per change of the check's
 * state or reason.
 *
 * Beneath that, words of any check that still name where a dependency lives (a URL, an address,
 * host:port, a file path, a login) or carry a driver's error text are replaced by a generic reason
 * too, for checks whose source gives text rather than its error; the service's own sentences (a
 * projection's lag, the drain's countdown) stay.
 */

// A URL of any scheme (postgres://user:password@host, redis://, nats://, https://rpc...?key=).
const URL_LIKE = /\b[a-z][a-z0-9+.-]*:\/\/\S+/i;
// An IPv4 address (with or without a port), a bracketed IPv6 address, or an unbracketed one
// written with '::' (fe80::1, 2001:db8::5:4222 as a driver or NATS names it).
const IP =
  /\b\d{1,3}(?:\.\d{1,3}){3}\b|\[[0-9a-f:.]+\]|(?:^|[\s(])[0-9a-f]{0,4}(?::[0-9a-f]{1,4})*::(?:[0-9a-f]{1,4}\b)?/i;
// host:port (localhost:5432, db.internal:6379, compose's postgres:5432); a name starting with a
// letter, so a timestamp is not one, and not a chain's CAIP-2 id (eip155:8453).
const HOST_PORT = /\b(?!eip155:|solana:)[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*:\d{2,5}\b/i;
// An absolute file path of two or more parts (an LMDB or snapshot directory, a socket).
const PATH = /(?:^|[\s('"=:])(?:\/[\w.@+-]+){2,}/;
// A login or a database's name quoted by the server (user "svc", role "x", database "signals").
// A libpq key=value connection string's password or host (password=..., host=db).
const LOGIN =
  /\b(?:user|role|database|schema|relation)\s+"[^"]*"|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\b(?:password|host|hostaddr)=\S/i;
// A driver's or the OS's error code (connect ECONNREFUSED, getaddrinfo ENOTFOUND, MDB_MAP_FULL).
const DRIVER =
  /\bE(?:CONN[A-Z]+|TIMEDOUT|NOTFOUND|AI_[A-Z]+|HOSTUNREACH|NETUNREACH|HOSTDOWN|PIPE|NOSPC|ACCES|PERM|ROFS|NOENT|IO|DQUOT)\b|\bMDB_[A-Z_]+\b|\bgetaddrinfo\b/;

const LEAKS = [URL_LIKE, IP, HOST_PORT, PATH, LOGIN, DRIVER];

/** Whether a check's text names where a dependency is, or carries a driver's words. */
export function leaks(text: string): boolean {
  return LEAKS.some((pattern) => pattern.test(text));
}

/** The generic reason for a failure's text: what kind of failure, not where (null: not a failure's). */
export function genericReason(text: string): string | null {
  const t = text.toLowerCase();
  if (/enospc|no space|out of space|disk full|53100|mdb_map_full|edquot/.test(t)) return 'out of space';
  if (
    /password|authenticat|noauth|wrongpass|permission denied|eacces|eperm|not authorized|unauthori[sz]ed|forbidden/.test(
      t,
    )
  ) {
    return 'login refused';
  }
  if (/etimedout|timed? ?out|timeout/.test(t)) return 'timed out';
  if (/econnrefused|refused/.test(t)) return 'refused';
  if (
    /unreachable|not connected|connection|closed|lost|reset|enotfound|eai_|getaddrinfo|terminat|fail|error/.test(
      t,
    )
  ) {
    return 'unreachable';
  }
  return null;
}

const LOGGED = ' (the full error is in the service log)';

function scrub(value: unknown, seen: { failing: boolean; reasons: string[] }): unknown {
  if (value instanceof Error) {
    const reason = failureReason(value);
    seen.reasons.push(reason);
    return `${reason}${LOGGED}`;
  }
  if (typeof value === 'string') {
    if (!leaks(value)) return value;
    // Words of a check that passes and do not read as a failure (a replay directory, say).
    const reason = genericReason(value) ?? (seen.failing ? 'unreachable' : 'withheld');
    seen.reasons.push(reason);
    return `${reason}${LOGGED}`;
  }
  if (Array.isArray(value)) return value.map((item) => scrub(item, seen));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, scrub(item, seen)]));
  }
  return value;
}

/**
 * A figure in a check's words: a number, but not the status of a reason (`HTTP 429`), whose change
 * (to `HTTP 401`, say) is a change of reason and is logged.
 */
const FIGURE = /(?<![\d.]|HTTP )\d+(?:\.\d+)?/g;

/** A check's answer with its figures (ages, positions, counts) left out, as its log line's key. */
function withoutFigures(value: unknown): unknown {
  if (typeof value === 'number') return '#';
  if (typeof value === 'string') return value.replace(FIGURE, '#');
  if (Array.isArray(value)) return value.map(withoutFigures);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, withoutFigures(item)]));
  }
  return value;
}

/**
 * The checks as /readyz shows them; the names of the checks with words withheld (their full result
 * is for the log), and for each of those what its log line is keyed on: its state and the reasons
 * shown, and its words for the log, not its figures (a stale chain's age grows at every probe).
 */
export function publicChecks(checks: Record<string, CheckResult>): {
  checks: Record<string, CheckResult>;
  hidden: string[];
  keys: Record<string, string>;
} {
  const hidden: string[] = [];
  const keys: Record<string, string> = {};
  const shown: Record<string, CheckResult> = {};
  for (const [name, result] of Object.entries(checks)) {
    const { cause, logged, ...rest } = result;
    const seen = { failing: !result.ok, reasons: [] as string[] };
    const open = scrub(rest, seen) as CheckResult;
    if (cause !== undefined) {
      const reason = failureReason(cause);
      seen.reasons.unshift(reason);
      // Only a failing check's detail says why it fails. A passing one's cause is an earlier try
      // that failed (the anchor's last send, a fetch the resolver backs off from): its own field
      // (`lastError`) shows the reason, and a detail would read as a failure on a check that is ok.
      if (!result.ok) open.detail = `${reason}${LOGGED}`;
    }
    shown[name] = open;
    if (seen.reasons.length === 0 && cause === undefined && logged === undefined) continue;
    hidden.push(name);
    keys[name] = JSON.stringify([withoutFigures(open), seen.reasons, logged ?? null]);
  }
  return { checks: shown, hidden, keys };
}
