/**
 * What HTTP itself reads (framing, the body's type and length, cookies, CORS for the browser): the
 * document's media types and security schemes say those. Every other header is one a client may
 * read, Trailer too (it names the fields that follow the body, which a client reads for them).
 */
const FRAMING = new Set([
  'content-type',
  'content-length',
  'content-encoding',
  'date',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'set-cookie',
]);

/** Header names (lower case) of an answer a client may read; a trailer counts as the header it names. */
export function readableHeaders(headers: Headers): string[] {
  const names = [...headers.keys()].filter((n) => !FRAMING.has(n) && !n.startsWith('access-control-'));
  const trailers = (headers.get('trailer') ?? '')
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter((t) => t !== '');
  return [...names, ...trailers];
}

/** The readable headers of an answer that its documented response does not declare. */
export function undeclaredHeaders(
  response: { headers?: Record<string, unknown> } | undefined,
  headers: Headers,
): string[] {
  const declared = Object.keys(response?.headers ?? {}).map((h) => h.toLowerCase());
  return readableHeaders(headers).filter((name) => !declared.includes(name));
}
