/**
 * The URL handed to pg: sslmode prefer, require and verify-ca named verify-full, which is what pg 8
 * makes of them (the server's certificate and its name checked). Named so, its parser does not
 * print its multi-line SECURITY WARNING about that reading (on stderr, above the start's line or a
 * command's output); deploy/README.md says it once. A URL with uselibpqcompat (libpq's meanings of
 * the modes) is handed as it is.
 */
export function pgConnectionString(url: string): string {
  if (/[?&]uselibpqcompat=/.test(url)) return url;
  return url.replace(/([?&])sslmode=(?:prefer|require|verify-ca)(?=[&#]|$)/, '$1sslmode=verify-full');
}
