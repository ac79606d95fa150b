import { readFileSync } from 'node:fs';
import type { FetchImplementation } from './live.ts';

/**
 * Test support: a fetch for ccxt that answers from recorded venue responses in `fixtures/`
 * and fails loudly on any request it was not told about, so no test can reach a network.
 */
export interface FixtureRoute {
  method: 'GET' | 'POST';
  /** URL without the query string, e.g. https://api.binance.com/api/v3/klines */
  url: string;
  /** Extra condition on the query parameters or the JSON body. */
  when?: (query: URLSearchParams, body: Record<string, unknown>) => boolean;
  /** A fixture file under fixtures/, or a literal answer. */
  reply: string | { status: number; file?: string; text?: string };
}

export interface FixtureRequest {
  method: string;
  url: string;
  body: Record<string, unknown>;
}

const FIXTURES = new URL('./fixtures/', import.meta.url);

function fixture(file: string): string {
  return readFileSync(new URL(file, FIXTURES), 'utf8');
}

export function fixtureFetch(routes: FixtureRoute[]): {
  fetch: FetchImplementation;
  requests: FixtureRequest[];
} {
  const requests: FixtureRequest[] = [];
  const fetch: FetchImplementation = async (rawUrl, init) => {
    const url = new URL(rawUrl);
    const method = (init.method ?? 'GET').toUpperCase();
    const body =
      typeof init.body === 'string' && init.body !== ''
        ? (JSON.parse(init.body) as Record<string, unknown>)
        : {};
    requests.push({ method, url: rawUrl, body });
    const base = `${url.origin}${url.pathname}`;
    const route = routes.find(
      (r) =>
        r.method === method && r.url === base && (r.when === undefined || r.when(url.searchParams, body)),
    );
    if (route === undefined) {
      throw new Error(`unexpected request in a test: ${method} ${rawUrl} ${JSON.stringify(body)}`);
    }
    const reply = typeof route.reply === 'string' ? { status: 200, file: route.reply } : route.reply;
    const text = reply.file !== undefined ? fixture(reply.file) : (reply.text ?? '');
    return new Response(text, { status: reply.status, headers: { 'content-type': 'application/json' } });
  };
  return { fetch, requests };
}
