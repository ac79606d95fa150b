/** What a parsed JSON value is, for the MCP path's checks of a request's params. */

/** An object with members: not null, not an array. */
export const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** What a JSON value is, in words: "a string", "null", "an array", "an object". */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return type === 'object' || type === 'undefined' ? `an ${type}` : `a ${type}`;
}
