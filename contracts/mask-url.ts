/**
 * A URL (or a comma-separated list of them, as NATS_URL may be) with any password replaced by
 * `***`, for every message and log line that names a server: `redis://admin:pw@h:6379` prints as
 * `redis://admin:***@h:6379`. A value that does not parse as a URL still has a `user:password@`
 * before its host masked, so a malformed setting cannot leak its password either.
 */
export function maskUrlCredentials(value: string): string {
  return value
    .split(',')
    .map((part) => {
      if (!part.includes('://')) return part.replace(/^(\s*[^:/@\s]*):[^@\s]*@/, '$1:***@');
      try {
        const parsed = new URL(part.trim());
        if (!parsed.password) return part;
        parsed.password = '***';
        return part.replace(part.trim(), parsed.toString());
      } catch {
        return part.replace(/^(\s*(?:[a-z][a-z0-9+.-]*:\/\/)?[^:/@\s]*):[^@\s]*@/i, '$1:***@');
      }
    })
    .join(',');
}
