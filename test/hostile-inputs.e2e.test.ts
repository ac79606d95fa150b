import { request as httpRequest } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Bad input drawn from /openapi.json itself, on the api role: for every public and keyed GET and
 * POST operation of the document (all but the MCP transports, which speak JSON-RPC), fast-check
 * sends garbage in its query (documented names, unknown names, repeats), its path parameters
 * (../, %00, bad percent-encoding, unicode) and its body (wrong types in each documented field,
 * arrays for objects, broken JSON, deep nesting, the wrong media type, none). Every answer must be
 * a status the operation documents (or a refusal its `default` lists), in a media type documented
 * for that status, valid against the schema given for it, never a 5xx, never a stack or a path of
 * ours; and nothing a refusal touched is written: the key's webhook list holds exactly the
 * subscriptions answered 201. A fixed seed and a bounded number of runs keep it repeatable.
 */

type Json = Record<string, unknown>;
interface Parameter {
  in: string;
  name: string;
  schema?: Json;
}
interface Operation {
  security?: Json[];
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema?: Json }> };
  responses: Record<string, { description?: string; content?: Record<string, { schema?: Json }> }>;
}
interface Target {
  method: 'GET' | 'POST';
  template: string;
  op: Operation;
  keyed: boolean;
}
interface Sent {
  target: Target;
  path: string;
  headers: [string, string][];
  body?: string | Buffer;
}

/** Fixed for CI; HOSTILE_SEED and HOSTILE_RUNS explore further by hand. */
const SEED = Number(process.env.HOSTILE_SEED ?? 20261129);
const RUNS = Number(process.env.HOSTILE_RUNS ?? 1000);

let running: TestService;
let base: string;
let key: string;
let doc: { paths: Record<string, Record<string, Operation>> };
let targets: Target[];
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);

beforeAll(async () => {
  running = await startTestService(['api']);
  base = running.service.url;
  key = await running.issue('pro');
  doc = (await (await fetch(`${base}/openapi.json`)).json()) as typeof doc;
  ajv.addSchema({ ...doc, $id: 'openapi' });
  targets = Object.entries(doc.paths).flatMap(([template, item]) =>
    (['get', 'post'] as const)
      .filter((m) => item[m] !== undefined && !template.startsWith('/mcp'))
      .map((m) => ({
        method: m.toUpperCase() as 'GET' | 'POST',
        template,
        op: item[m]!,
        keyed: JSON.stringify(item[m]!.security ?? []).includes('apiKey'),
      })),
  );
}, 60_000);
afterAll(async () => {
  await running?.stop();
});

/** One request, its fields exactly as listed (a header twice included), its body bytes as given. */
function send(sent: Sent): Promise<{ status: number; type: string; text: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: sent.target.method,
        path: sent.path,
        headers: [
          ['host', url.host],
          ...(sent.target.keyed ? [['authorization', `Bearer ${key}`]] : []),
          ...sent.headers,
        ] as unknown as Record<string, string>,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () =>
          resolve({
            status: res.statusCode!,
            type: String(res.headers['content-type'] ?? '')
              .split(';')[0]!
              .trim(),
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(sent.body);
  });
}

const pointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/** Checks one answer against the document; returns the problem, or null. */
function problem(sent: Sent, res: { status: number; type: string; text: string }): string | null {
  const { op, template, method } = sent.target;
  if (res.status >= 500) return 'a 5xx';
  if (/\n\s+at |node_modules|\/services\/|\.ts:\d+/.test(res.text) && res.status >= 400)
    return 'an internal detail in a refusal';
  const own = op.responses[String(res.status)];
  const status = own ? String(res.status) : 'default';
  const response = own ?? (res.status >= 400 ? op.responses.default : undefined);
  if (!response) return 'a status the operation does not document';
  if (!own && response.description && res.type === 'application/json') {
    const code = (JSON.parse(res.text) as { code?: string }).code;
    if (!code || !response.description.includes(code)) return `${code} is not among default's refusals`;
  }
  if (!response.content || res.text === '') return null;
  const media = Object.keys(response.content).find((t) => t.split(';')[0]!.trim() === res.type);
  if (!media) return `${res.type} is not documented for ${status}`;
  if (res.type !== 'application/json') return null;
  const validate = ajv.getSchema(
    `openapi#/paths/${pointer(template)}/${method.toLowerCase()}/responses/${status}/content/${pointer(media)}/schema`,
  );
  if (validate && !validate(JSON.parse(res.text))) return ajv.errorsText(validate.errors);
  return null;
}

// Values a hostile client puts where a field, a parameter or a path segment is expected.
const ODD = [
  '',
  ' ',
  '-1',
  '0',
  '1.5',
  '1e309',
  'NaN',
  'null',
  '../../etc/passwd',
  '\u0000',
  'a\u0000b',
  '\u202e\ufeff',
  '\ud83d',
  'top:0',
  'top:101',
  '2026-13-45',
  '9999999999999999999999',
  'x'.repeat(5_000),
];
const oddString = fc.oneof(fc.constantFrom(...ODD), fc.string({ maxLength: 40, unit: 'binary' }));
const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  oddString,
  fc.constantFrom(null, true, -1, 1.5, -0, 1e308, Number.MAX_SAFE_INTEGER + 2, [], {}, [null], [[]]),
  fc.integer(),
  fc.double({ noNaN: true }),
  fc.array(oddString, { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), oddString, { maxKeys: 2 }),
);
/** Raw query or path text: encoded garbage, and escapes no decoder takes. */
const rawSegment = fc.oneof(
  oddString.map((s) => encodeURIComponent(s.replace(/[\ud800-\udfff]/g, ''))),
  fc.constantFrom('%', '%zz', '%FF%FE', '%00', '..%2F..%2F', '%2e%2e', 'a%2Fb', '%E2%80%AE', '..'),
);

function bodyOf(target: Target): fc.Arbitrary<Pick<Sent, 'headers' | 'body'>> {
  const json: [string, string] = ['content-type', 'application/json'];
  const properties = Object.keys(
    (target.op.requestBody?.content['application/json']?.schema?.properties as Json | undefined) ?? {},
  );
  const fields = fc
    .dictionary(fc.constantFrom(...properties, 'unknown_field', '__proto__'), oddValue, {
      minKeys: 1,
      maxKeys: 4,
    })
    .map((o) => JSON.stringify(o));
  const text = fc.oneof(
    ...(properties.length > 0 ? [fields, fields] : []),
    fc.json({ maxDepth: 3 }),
    fc.constantFrom(
      '',
      '{"a":',
      '[]',
      'null',
      '42',
      '"x"',
      '{"a":1,"a":2}',
      '{"__proto__":{"x":1}}',
      '\ufeff{}',
    ),
    fc.integer({ min: 65, max: 3_000 }).map((n) => `${'['.repeat(n)}${']'.repeat(n)}`),
    fc.string({ maxLength: 60, unit: 'binary' }),
  );
  const media = fc.constantFrom<[string, string][]>(
    [json],
    [json],
    [json],
    [],
    [['content-type', 'text/plain']],
    [['content-type', 'application/x-www-form-urlencoded']],
    [json, json],
    [['content-type', 'application/json; charset=utf-16']],
  );
  return fc.record({ headers: media, body: text });
}

function requestOf(target: Target): fc.Arbitrary<Sent> {
  const parameters = target.op.parameters ?? [];
  const inPath = parameters.filter((p) => p.in === 'path').map((p) => p.name);
  const inQuery = parameters.filter((p) => p.in === 'query').map((p) => p.name);
  const segments = fc.tuple(...inPath.map(() => fc.oneof(rawSegment, fc.constant('none_such'))));
  const query = fc.array(
    fc.tuple(fc.constantFrom(...inQuery, 'unknown', 'limit[]', '__proto__'), rawSegment),
    { maxLength: 4 },
  );
  const body = target.method === 'POST' ? bodyOf(target) : fc.constant({ headers: [] as [string, string][] });
  return fc.record({ segments, query, body }).map(({ segments, query, body }) => {
    let i = 0;
    const path = target.template.replace(/\{[^}]+\}/g, () => segments[i++]!);
    const search = query.map(([name, value]) => `${name}=${value}`).join('&');
    const sent: Sent = { target, path: search ? `${path}?${search}` : path, ...body };
    // A counterexample printed as the request, not the whole operation it was drawn from.
    return Object.assign(sent, {
      [fc.toStringMethod]: () =>
        `${target.method} ${sent.path} ${JSON.stringify(sent.headers)} ${JSON.stringify(String(sent.body ?? '').slice(0, 200))}`,
    });
  });
}

describe('hostile input drawn from the OpenAPI document', () => {
  it('answers every bad request with a documented status, media type and shape, and writes nothing it refused', async () => {
    let created = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...targets).chain((target) => requestOf(target)),
        async (sent) => {
          const res = await send(sent);
          if (sent.target.template === '/api/webhooks' && sent.target.method === 'POST' && res.status === 201)
            created++;
          const found = problem(sent, res);
          expect(
            found,
            `${sent.target.method} ${sent.path.slice(0, 200)} -> ${res.status} ${res.text.slice(0, 300)}`,
          ).toBeNull();
        },
      ),
      { seed: SEED, numRuns: RUNS, endOnFailure: true },
    );
    const listed = await fetch(`${base}/api/webhooks?status=all`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const all = (await listed.json()) as { webhooks?: unknown[] };
    expect(all.webhooks?.length ?? 0).toBe(created);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });

  it('answers a JSON body its operation does not take in a shape the operation documents', async () => {
    // The consent page's form routes parsed JSON and refused it as 400 INVALID_JSON, where their
    // 400 is an HTML page.
    for (const target of targets.filter((t) => t.method === 'POST' && !t.op.requestBody)) {
      for (const body of ['{"a":', '{"api_key":"sk_live_x"}']) {
        const path = target.template.replace(/\{[^}]+\}/g, 'none_such');
        const sent: Sent = { target, path, headers: [['content-type', 'application/json']], body };
        const res = await send(sent);
        expect(
          problem(sent, res),
          `${target.method} ${path} -> ${res.status} ${res.text.slice(0, 200)}`,
        ).toBeNull();
      }
    }
  });

  it('answers an empty path parameter in a shape its operation documents', async () => {
    // GET /oauth/register/ reached the OAuth library, which answered a bare text/plain 404.
    for (const target of targets.filter((t) => t.template.includes('{'))) {
      const path = target.template.replace(/\{[^}]+\}/g, '');
      const sent: Sent = { target, path, headers: [] };
      const res = await send(sent);
      expect(
        problem(sent, res),
        `${target.method} ${path} -> ${res.status} ${res.text.slice(0, 200)}`,
      ).toBeNull();
    }
  });

  it('answers a path whose parameter is empty, asked with a method its template does not take, 404 (no such path), not 405', async () => {
    // POST /api/webhooks/ matches /api/webhooks/:id only with an empty id: a 405 ("it takes DELETE,
    // OPTIONS, PATCH") would tell a client that added a slash to change its method, not its path.
    for (const [method, path] of [
      ['POST', '/api/webhooks/'],
      ['GET', '/api/webhooks/'],
      ['GET', '/api/webhooks//test'],
      ['POST', '/track-record/assets/'],
    ] as const) {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        ...(method === 'POST' ? { body: '{}' } : {}),
      });
      const body = (await res.json()) as { code?: string };
      expect(res.status, `${method} ${path}: ${JSON.stringify(body)}`).toBe(404);
      expect(body.code, `${method} ${path}`).toBe('NOT_FOUND');
      expect(res.headers.get('allow'), `${method} ${path}`).toBeNull();
    }
  });

  it('answers a path parameter that is not validly percent-encoded in a shape its operation documents', async () => {
    // The app answers BAD_URL in the catalog's shape before the route runs; the OAuth operations'
    // own 400 (an HTML page, RFC 6749's {error, error_description}) did not declare it.
    for (const target of targets.filter((t) => t.template.includes('{'))) {
      for (const raw of ['%zz', '%FF%FE']) {
        const path = target.template.replace(/\{[^}]+\}/g, raw);
        const sent: Sent = { target, path, headers: [] };
        const res = await send(sent);
        expect(
          problem(sent, res),
          `${target.method} ${path} -> ${res.status} ${res.text.slice(0, 200)}`,
        ).toBeNull();
      }
    }
  });
});
