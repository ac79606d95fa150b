import { connect } from 'node:net';

/**
 * HTTP/1.1 on a raw socket, for the requests fetch() will not send as written: a header field
 * twice, bytes that are not HTTP, a request line or header block past the parser's limits, a body
 * that stops short, an absolute-form target, a second request pipelined behind the first.
 */

/**
 * Writes `chunks` on a fresh connection to `url`'s host and port, as they are, and resolves with
 * every byte the server sends until it closes the connection.
 */
export function rawExchange(url: string, chunks: readonly (string | Uint8Array)[]): Promise<Buffer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const received: Buffer[] = [];
    const socket = connect(Number(port), hostname, () => {
      for (const chunk of chunks) socket.write(chunk);
    });
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(received)));
  });
}

export interface RawAnswer {
  status: number;
  /** Field names lower-cased; a field sent more than once holds its values joined by ", ". */
  headers: Map<string, string>;
  /** The body as UTF-8, the chunked transfer coding undone. */
  text: string;
  /** The body read as JSON; undefined when it is empty or not JSON. */
  // biome-ignore lint/suspicious/noExplicitAny: a JSON answer read field by field
  body: any;
}

/**
 * The first answer in `raw`: its status, header fields and body (the chunked transfer coding
 * undone, else Content-Length bytes, else everything up to the close).
 */
export function readAnswer(raw: Buffer): RawAnswer {
  const end = raw.indexOf('\r\n\r\n');
  const head = raw.subarray(0, end < 0 ? raw.length : end).toString('latin1');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const prior = headers.get(name);
    headers.set(name, prior === undefined ? value : `${prior}, ${value}`);
  }
  let rest = end < 0 ? Buffer.alloc(0) : raw.subarray(end + 4);
  if (/(^|,)\s*chunked\s*$/i.test(headers.get('transfer-encoding') ?? '')) {
    const parts: Buffer[] = [];
    for (;;) {
      const lineEnd = rest.indexOf('\r\n');
      const size = Number.parseInt(rest.subarray(0, lineEnd).toString('latin1'), 16);
      if (lineEnd < 0 || !(size > 0)) break;
      parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
      rest = rest.subarray(lineEnd + 2 + size + 2);
    }
    rest = Buffer.concat(parts);
  } else if (headers.has('content-length')) {
    rest = rest.subarray(0, Number(headers.get('content-length')));
  }
  const text = rest.toString('utf8');
  let body: unknown;
  try {
    body = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: Number(statusLine.split(' ')[1]), headers, text, body };
}

/**
 * Sends one request to `url` on a raw socket and reads its answer. The fields go in the order
 * given, an array value once per value: Host (`url`'s host unless `headers` names one), the
 * fields, Content-Length of the body and Connection: close. `target` is the request line's target,
 * `url`'s path and query unless given (an absolute URL sends the absolute form).
 */
export async function rawRequest(
  url: string,
  {
    method = 'POST',
    target,
    headers = {},
    body = '',
  }: {
    method?: string;
    target?: string;
    headers?: Record<string, string | readonly string[]>;
    body?: string | Uint8Array;
  },
): Promise<RawAnswer> {
  const { host, pathname, search } = new URL(url);
  const named = Object.keys(headers).some((name) => name.toLowerCase() === 'host');
  const fields = [
    ...(named ? [] : [`Host: ${host}`]),
    ...Object.entries(headers).flatMap(([name, value]) =>
      (typeof value === 'string' ? [value] : value).map((v) => `${name}: ${v}`),
    ),
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
  ];
  const head = `${method} ${target ?? `${pathname}${search}`} HTTP/1.1\r\n${fields.map((f) => `${f}\r\n`).join('')}\r\n`;
  return readAnswer(await rawExchange(url, [head, body]));
}
