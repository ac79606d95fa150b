/**
 * JSON with object keys sorted at every depth, one byte string per value: RFC 8785 (JCS) for any
 * value JSON can carry (keys in UTF-16 code-unit order, numbers and strings as JSON.stringify
 * writes them, undefined members left out, undefined in an array as null). The verdict hash chain
 * and the paid-response fingerprints are taken over it, so its output for a value never changes.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}
