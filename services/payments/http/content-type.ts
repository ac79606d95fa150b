import { sentValues } from '../../shared/raw-headers.ts';

/**
 * The /x402/* routes take JSON only, and say so exactly once. A Content-Type sent twice, two
 * media types merged into one header ("application/json, application/json", or joined by ';'),
 * a non-JSON media type, a body without any Content-Type, or a body with a Content-Encoding
 * (gzip…: the routes decode none) is `invalid_content_type`: such a request may be read
 * differently by proxies and by us, so it is refused rather than guessed at.
 */
export function contentTypeProblem(rawHeaders: string[], hasBody: boolean): string | null {
  if (hasBody) {
    // `identity` (or an empty value) names no coding. A coded body is neither read as plain JSON
    // nor quoted at a price its bytes were never read for, as the /api and /mcp parsers refuse it.
    const codings = sentValues(rawHeaders, 'content-encoding')
      .flatMap((value) => value.split(','))
      .map((coding) => coding.trim())
      .filter((coding) => coding !== '' && coding.toLowerCase() !== 'identity');
    if (codings.length > 0) {
      return `the body is sent with Content-Encoding ${codings.join(', ')}; send it uncompressed, as application/json`;
    }
  }
  const values = sentValues(rawHeaders, 'content-type');
  if (values.length > 1) return 'Content-Type was sent more than once; send it exactly once';
  const value = values[0];
  if (value === undefined) {
    return hasBody ? 'a body was sent without Content-Type; send Content-Type: application/json' : null;
  }
  // What nearly every call sends, decided without splitting or lower-casing it.
  if (value === 'application/json') return null;
  // Quoted parameter values are blanked first, so a ',', ';' or '/' inside one joins nothing.
  const blanked = value.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  const [first, ...parameters] = blanked.split(';');
  // Two media types joined (contract 7.2): by ',' ("application/json, application/json"), or by
  // ';' with a media type where a parameter (name=value) would stand ("application/json;application/json").
  const joined =
    blanked.includes(',') ||
    parameters.some((parameter) => !parameter.includes('=') && parameter.includes('/'));
  if (joined) return `Content-Type "${value}" joins several media types; send exactly application/json`;
  const mediaType = first!.trim().toLowerCase();
  if (mediaType !== 'application/json') {
    return `Content-Type "${mediaType}" is not accepted; send the body as JSON with Content-Type: application/json`;
  }
  return null;
}
