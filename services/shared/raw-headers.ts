/**
 * The values of every `name` field a request carries (`name` lower-case), in the order sent, from
 * its raw headers: Node keeps one Content-Type or Host of several and joins others, so a repeated
 * field is only seen here. More than one value is a field sent more than once.
 */
export function sentValues(rawHeaders: readonly string[], name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const sent = rawHeaders[i]!;
    // Runs on every request: only a name of the right length is lower-cased and compared.
    if (sent.length === name.length && sent.toLowerCase() === name) values.push(rawHeaders[i + 1] ?? '');
  }
  return values;
}
