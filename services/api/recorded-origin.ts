/**
 * The recorded answers (openapi-examples.json, written by the conformance test) name one fixed
 * stand-in origin, RECORDED_ORIGIN, wherever the recording run named its own (its ephemeral
 * port, its `http://localhost:<PORT>` base): each is served naming the origin it is served from
 * (PUBLIC_BASE_URL, else the request's), as every other document does.
 */
export const RECORDED_ORIGIN = 'https://recorded.example:8443';
const RECORDED = new URL(RECORDED_ORIGIN);

/** Every spelling of an origin a recorded answer holds: whole, percent-encoded, host, hostname. */
function spellings(origin: string): [string, string][] {
  const url = new URL(origin);
  return [
    [RECORDED_ORIGIN, url.origin],
    [encodeURIComponent(RECORDED_ORIGIN), encodeURIComponent(url.origin)],
    [RECORDED.host, url.host],
    [RECORDED.hostname, url.hostname],
  ];
}

/** Inside a JSON string: what JSON.stringify would write for `text`, without its quotes. */
const inJson = (text: string) => JSON.stringify(text).slice(1, -1);

/**
 * `value` (a recorded answer: JSON or text) naming `origin` wherever it names the recorded one;
 * `value` itself when it names none.
 */
export function servedAt<T>(value: T, origin: string): T {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (text === undefined || !text.includes(RECORDED.hostname)) return value;
  const json = typeof value !== 'string';
  let out = text;
  for (const [from, to] of spellings(origin)) {
    const replacement = json ? inJson(to) : to;
    out = out.replaceAll(from, () => replacement);
  }
  return (json ? JSON.parse(out) : out) as T;
}

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * What the recorder writes: `text` (a recorded answer's JSON or text) with each of the run's own
 * origins (`served`) spelt as the recorded origin, in each spelling; a bare hostname only where
 * no port follows it (a callback's `127.0.0.1:9` is a third party's, not the service's).
 */
export function asRecorded(text: string, served: readonly string[]): string {
  let out = text;
  for (const origin of served) {
    const url = new URL(origin);
    out = out
      .replaceAll(url.origin, RECORDED_ORIGIN)
      .replaceAll(encodeURIComponent(url.origin), encodeURIComponent(RECORDED_ORIGIN))
      .replace(new RegExp(`(?<![\\w.-])${escaped(url.host)}(?![\\w.:-])`, 'g'), RECORDED.host)
      .replace(new RegExp(`(?<![\\w.-])${escaped(url.hostname)}(?![\\w.-]|:\\d)`, 'g'), RECORDED.hostname);
  }
  return out;
}
