/**
 * A URL (or a comma-separated list of them, as NATS_URL may be) with any password replaced by
 * `***`, for every message and log line that names a server: `redis://admin:pw@h:6379` prints as
 * `redis://admin:***@h:6379`. A value that does not parse as a URL still has a `user:password@`
 * before its host masked (everything from the user's colon to the last `@`), whatever is
 * mistyped before the user (`postgres//u:pw@h`, `redis:/u:pw@h`, `postgres:///u:pw@h`, which
 * parses with no host), so a malformed setting cannot leak its password either. The list is cut
 * only at a comma that starts another server (`,nats://`, `,nats//`, `,nats:/`), as a password
 * may hold a comma (`postgres://u:pa,ss@h`).
 */
const UNPARSED_USERINFO = /^(\s*(?:[a-z][a-z0-9+.-]*:?\/+|[a-z][a-z0-9+.-]*:)?[^:/@\s]*):.*@/i;
const NEXT_SERVER = /,(?=\s*[a-z][a-z0-9+.-]*(?::\/|\/\/))/i;

export function maskUrlCredentials(value: string): string {
  return value
    .split(NEXT_SERVER)
    .map((part) => {
      if (!part.includes('://')) return part.replace(UNPARSED_USERINFO, '$1:***@');
      try {
        const parsed = new URL(part.trim());
        // `postgres:///u:pw@h` (a slash too many) parses with no host, its user:password@ in the path.
        if (!parsed.password) return parsed.host === '' ? part.replace(UNPARSED_USERINFO, '$1:***@') : part;
        parsed.password = '***';
        return part.replace(part.trim(), parsed.toString());
      } catch {
        return part.replace(UNPARSED_USERINFO, '$1:***@');
      }
    })
    .join(',');
}
