import type { IncomingMessage } from 'node:http';

/**
 * Request headers of the MCP path read as HTTP defines them, not as the SDK transports read them
 * (a substring of the joined value):
 * - Accept is a list of media ranges: type and subtype compared without regard to case,
 *   parameters ignored but `q=0` (not acceptable), and `*\/*` / `application/*` / `text/*`
 *   covering what they name (RFC 9110 §12.5.1). So `Application/JSON, Text/Event-Stream` is
 *   accepted and `application/jsonx, text/event-streamy` is not;
 * - a header sent more than once is counted from the raw headers (Node joins the values of most
 *   headers with ", ", and keeps only the first Content-Type).
 */

/** What a client sends when it accepts both answers, as the SDK clients spell it. */
export const ACCEPT_BOTH = 'application/json, text/event-stream';

/** The media ranges an Accept header lists with a q above 0, lower-cased, parameters dropped. */
function acceptedRanges(accept: string): string[] {
  const ranges: string[] = [];
  for (const item of accept.split(',')) {
    const [range, ...params] = item.split(';');
    const type = range!.trim().toLowerCase();
    if (type === '') continue;
    const q = params.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith('q='));
    if (q !== undefined && !(Number(q.slice(2)) > 0)) continue;
    ranges.push(type);
  }
  return ranges;
}

const covers = (ranges: string[], type: string): boolean => {
  const major = type.slice(0, type.indexOf('/'));
  return ranges.some((r) => r === type || r === '*/*' || r === `${major}/*`);
};

/**
 * Whether an Accept header takes what the method answers: JSON and an event stream for a POST
 * (the transport may answer either), an event stream for a GET. Other methods take anything.
 */
export function acceptsAnswer(accept: string | string[] | undefined, method: string): boolean {
  if (method !== 'POST' && method !== 'GET') return true;
  if (accept === ACCEPT_BOTH) return true;
  if (accept === undefined) return false;
  const ranges = acceptedRanges(Array.isArray(accept) ? accept.join(',') : accept);
  if (!covers(ranges, 'text/event-stream')) return false;
  return method === 'GET' || covers(ranges, 'application/json');
}

/**
 * Sets a request header to one value, in the parsed headers and the raw ones alike: the SDK
 * transports rebuild the request from its raw headers. Used to hand them an Accept header this
 * route accepted in a spelling their substring check would refuse.
 */
export function replaceHeader(raw: IncomingMessage, name: string, value: string): void {
  const headers = raw.rawHeaders;
  const kept: string[] = [];
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i]!.toLowerCase() !== name) kept.push(headers[i]!, headers[i + 1]!);
  }
  kept.push(name, value);
  headers.length = 0;
  headers.push(...kept);
  raw.headers[name] = value;
}
