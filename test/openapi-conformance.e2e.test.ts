import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createSiweMessage } from 'viem/siwe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publicBaseUrl } from '../contracts/config.ts';
import { ERRORS } from '../contracts/errors.ts';
import { asRecorded } from '../services/api/recorded-origin.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { MCP_ACCEPT, mcpInitialize } from './mcp-wire.ts';
import { readableHeaders, undeclaredHeaders } from './openapi-headers.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Every documented operation called as a client generated from /openapi.json would call it, on
 * happy and refusal paths: the status must be documented for the operation, the answer's media
 * type listed for that status, the documented headers present, every header a client may read
 * (all but HTTP's framing, cookies and CORS) documented for it, and the body valid against the
 * schema the document gives it. The answers are the document's examples:
 * `RECORD_OPENAPI_EXAMPLES=1` writes them to services/api/openapi-examples.json, which the
 * document serves beside each schema; every run checks those examples still validate.
 */
const EXAMPLES_FILE = join(import.meta.dirname, '../services/api/openapi-examples.json');
const RECORD = process.env.RECORD_OPENAPI_EXAMPLES === '1';
/** This run's public base (no PUBLIC_BASE_URL, PORT=0): what its verify links and OAuth issuer name. */
const RUN_BASE = publicBaseUrl({ PORT: 0 });
type Recorded = Record<string, Record<string, { type: string; body: unknown }>>;
const recorded: Recorded = {};
const called = new Set<string>();

/** An answer short enough for the document: long lists cut to their first items, long texts to their start. */
function exampleOf(body: unknown, depth = 0): unknown {
  if (typeof body === 'string') return body.length > 1_500 ? `${body.slice(0, 1_500)}…` : body;
  if (Array.isArray(body)) return body.slice(0, 3).map((item) => exampleOf(item, depth + 1));
  if (body && typeof body === 'object') {
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [k, exampleOf(v, depth + 1)]));
  }
  return body;
}

type Json = Record<string, unknown>;
type Operation = {
  operationId?: string;
  security?: Json[];
  requestBody?: { content?: Record<string, { schema?: Json }> };
  responses: Record<
    string,
    {
      description?: string;
      content?: Record<string, { schema?: Json; example?: unknown }>;
      headers?: Record<string, unknown>;
    }
  >;
};

let dir: string;
let running: TestService;
let url: string;
let doc: { paths: Record<string, Record<string, Operation>>; servers?: { url: string }[] };
let key: string;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
const compiled = new Map<Json, ValidateFunction>();

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'conformance-'));
  running = await startTestService(['api', 'engine', 'projections', 'dispatcher'], {
    // A subscription to a loopback URL (nothing listens: no delivery is asserted here).
    WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
    WEBHOOK_ALLOWED_PORTS: '*',
    // The limiter on, so its headers are checked too: budgets no call here reaches, but the
    // starter plan's, which one caller below runs out of.
    RATE_LIMIT_ENABLED: 'true',
    RATE_LIMIT_ANONYMOUS: '1000000',
    RATE_LIMIT_FREE: '1000000',
    RATE_LIMIT_PRO: '1000000',
    RATE_LIMIT_STARTER: '2',
    // Windows end on the clock: an hour's, so one gives the budget back mid-test only in a run that
    // straddles the full hour (about 1 in 1,000 for a few seconds' test).
    RATE_LIMIT_WINDOW_MS: '3600000',
  });
  url = running.service.url;
  key = await running.issue();
  doc = (await (await fetch(`${url}/openapi.json`)).json()) as typeof doc;
}, 60_000);
afterAll(async () => {
  if (RECORD) await writeFile(EXAMPLES_FILE, `${JSON.stringify(recorded, null, 1)}\n`);
  await running?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

interface Call {
  method: string;
  /** The documented path template. */
  template: string;
  /** The concrete path (with query), when it differs from the template. */
  path?: string;
  body?: unknown;
  /** A raw body (sent as is with Content-Type application/json). */
  raw?: string;
  /** A form body (application/x-www-form-urlencoded), as the OAuth endpoints and the consent page take. */
  form?: Record<string, string>;
  /** Headers the answer must carry, each documented for its status (Location, WWW-Authenticate). */
  sends?: string[];
  /** Cookies kept across calls, as a browser keeps them (the consent page's interaction). */
  jar?: CookieJar;
  headers?: Record<string, string>;
  auth?: boolean;
  status: number;
  /** A refusal any operation may answer (RATE_LIMITED…): checked against the `default` response. */
  anyRoute?: boolean;
  /** The Authorization field sent a second time with this value (fetch would merge the two into one). */
  secondAuthorization?: string;
}

/** A request whose fields are sent exactly as listed, a field twice included (fetch merges repeats). */
function sendRaw(
  target: URL,
  method: string,
  fields: [string, string][],
  body: string | undefined,
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      target,
      { method, headers: [['host', target.host], ...fields] as unknown as Record<string, string> },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const headers = new Headers();
          for (let i = 0; i < res.rawHeaders.length; i += 2)
            headers.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
          resolve(new Response(Buffer.concat(chunks), { status: res.statusCode!, headers }));
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The cookies a browser would keep, by name and path; sent where their path matches. */
class CookieJar {
  private readonly cookies = new Map<string, { path: string; value: string }>();
  take(headers: Headers) {
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';');
      const [name, ...value] = pair!.split('=');
      const path =
        attributes.map((a) => a.trim().split('=')).find(([k]) => k!.toLowerCase() === 'path')?.[1] ?? '/';
      const gone = /expires=Thu, 01 Jan 1970/i.test(line) || value.join('=') === '';
      if (gone) this.cookies.delete(`${name!.trim()} ${path}`);
      else this.cookies.set(`${name!.trim()} ${path}`, { path, value: `${name!.trim()}=${value.join('=')}` });
    }
  }
  header(pathname: string): string {
    return [...this.cookies.values()]
      .filter((c) => pathname === c.path || pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`))
      .map((c) => c.value)
      .join('; ');
  }
}

/** The headers of the last answer (Location, WWW-Authenticate): the next call of a flow follows them. */
let answered: Headers;

function validator(schema: Json): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v;
}

/** Every member of every schema of the document's operations and deliveries, with its types and formats (its own and its anyOf branches'). */
type Member = { path: string; name: string; types: unknown[]; formats: unknown[]; schema: Json };
function documentMembers(): Member[] {
  const found: Member[] = [];
  const walk = (node: unknown, path: string) => {
    if (!node || typeof node !== 'object') return;
    if (Array.isArray(node)) {
      node.forEach((item, i) => {
        walk(item, `${path}/${i}`);
      });
      return;
    }
    const { properties } = node as { properties?: Record<string, Json> };
    for (const [name, member] of Object.entries(properties ?? {})) {
      const branches = [member, ...((member.anyOf as Json[] | undefined) ?? [])];
      found.push({
        path,
        name,
        types: branches.flatMap((b) => b.type ?? []),
        formats: branches.map((b) => b.format),
        schema: member,
      });
    }
    for (const [key, value] of Object.entries(node))
      if (key !== 'example' && key !== 'examples') walk(value, `${path}/${key}`);
  };
  walk(doc.paths, '#/paths');
  walk((doc as { webhooks?: unknown }).webhooks, '#/webhooks');
  return found;
}

/**
 * The members the schema gives the object at `path` (`_service`, or a JSON-RPC refusal's
 * error.data._service), through $ref, anyOf, oneOf and allOf.
 */
function serviceMembers(
  schema: Json,
  path: readonly string[] = ['_service'],
  seen = new Set<Json>(),
): Set<string> {
  const members = new Set<string>();
  if (seen.has(schema)) return members;
  seen.add(schema);
  const add = (found: Set<string>) => {
    for (const m of found) members.add(m);
  };
  const ref = schema.$ref;
  if (typeof ref === 'string' && ref.startsWith('#/')) {
    const target = ref
      .slice(2)
      .split('/')
      .reduce<unknown>((node, part) => (node as Json | undefined)?.[part], doc);
    if (target) add(serviceMembers(target as Json, path, seen));
  }
  const next = (schema.properties as Record<string, Json> | undefined)?.[path[0]!];
  if (next && path.length === 1) add(new Set(Object.keys((next.properties as Json | undefined) ?? {})));
  if (next && path.length > 1) add(serviceMembers(next, path.slice(1), seen));
  for (const branch of ['anyOf', 'oneOf', 'allOf'] as const)
    for (const sub of (schema[branch] as Json[] | undefined) ?? []) add(serviceMembers(sub, path, seen));
  return members;
}

/** Calls and checks one answer against the document; returns the parsed JSON body, or the text (if any). */
async function conform(call: Call): Promise<unknown> {
  const headers: Record<string, string> = { ...call.headers };
  if (call.auth !== false) headers.authorization = `Bearer ${key}`;
  let body: string | undefined;
  if (call.raw !== undefined || call.body !== undefined) {
    // As sent unless the call names its own (Content-Type twice, text/plain).
    headers['content-type'] ??= 'application/json';
    body = call.raw ?? JSON.stringify(call.body);
  }
  if (call.form !== undefined) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(call.form).toString();
  }
  const target = new URL(url + (call.path ?? call.template));
  const cookie = call.jar?.header(target.pathname);
  if (cookie) headers.cookie = cookie;
  // A client follows no redirect on its own: a 303 is an answer to check like any other.
  const res =
    call.secondAuthorization === undefined
      ? await fetch(target, {
          method: call.method,
          headers,
          redirect: 'manual',
          ...(body === undefined ? {} : { body }),
        })
      : await sendRaw(
          target,
          call.method,
          [...Object.entries(headers), ['authorization', call.secondAuthorization]],
          body,
        );
  call.jar?.take(res.headers);
  answered = res.headers;
  const bytes = Buffer.from(await res.arrayBuffer());
  const label = `${call.method} ${call.path ?? call.template} -> ${res.status}: ${bytes.toString('utf8').slice(0, 300)}`;
  expect(res.status, label).toBe(call.status);
  const operation = doc.paths[call.template]?.[call.method.toLowerCase()];
  expect(operation, `${call.method} ${call.template} is documented`).toBeDefined();
  expect(operation!.operationId, `${label}: operationId`).toMatch(/^[a-z][A-Za-z0-9]+$/);
  called.add(`${call.method} ${call.template}`);
  // A body the service took is one the document describes (a generated client has no other way to
  // send it): its media type listed, its fields valid against the schema given for it.
  if (body !== undefined && res.status < 400) {
    const sent = headers['content-type']!.split(';')[0]!.trim();
    const media = operation!.requestBody?.content?.[sent];
    expect(media, `${label}: request body ${sent} documented`).toBeDefined();
    if (media!.schema) {
      const validate = validator(media!.schema);
      const value = call.form ?? call.body ?? JSON.parse(body);
      expect(validate(value), `${label}: request body\n${ajv.errorsText(validate.errors)}`).toBe(true);
    }
  }
  // The response of the answer's status, as a client picks it; `default` only where none is declared.
  const response =
    operation!.responses[String(res.status)] ?? (call.anyRoute ? operation!.responses.default : undefined);
  expect(response, `${label}: status documented`).toBeDefined();
  for (const name of call.sends ?? []) {
    expect(res.headers.has(name), `${label}: header ${name} sent`).toBe(true);
    expect(Object.keys(response!.headers ?? {}), `${label}: header ${name} documented`).toContain(name);
  }
  // Every header a client may read is in the document, for this operation and status.
  expect(undeclaredHeaders(response, res.headers), `${label}: headers sent and not documented`).toEqual([]);
  headersSeen.push(...readableHeaders(res.headers));
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
  const record = (body: unknown) => {
    const id = operation!.operationId!;
    // Recorded naming one stand-in origin (RECORDED_ORIGIN) where this run named its own (its port, its
    // http://localhost:<PORT> base): each is served naming the origin it is served from.
    const example = exampleOf(body);
    const text = asRecorded(typeof example === 'string' ? example : JSON.stringify(example), [url, RUN_BASE]);
    recorded[id] = {
      [String(res.status)]: { type, body: typeof example === 'string' ? text : JSON.parse(text) },
      ...recorded[id],
    };
  };
  if (bytes.length === 0 || !response!.content) return null;
  const media = Object.entries(response!.content).find(([t]) => t.split(';')[0]!.trim() === type);
  expect(media, `${label}: ${type} documented (${Object.keys(response!.content)})`).toBeDefined();
  const schema = media![1].schema;
  if (!schema) return null;
  if (type === 'application/json' || type.endsWith('+json')) {
    const json = JSON.parse(bytes.toString('utf8'));
    const validate = validator(schema);
    expect(validate(json), `${label}\n${ajv.errorsText(validate.errors)}`).toBe(true);
    // Every member of the `_service` block an answer carries is one its schema describes (the
    // caller, the quota the README promises on every answer, a receipt), not an untyped map.
    const carried = json as { _service?: unknown; error?: { data?: { _service?: unknown } } } | null;
    for (const [path, service] of [
      [['_service'], carried?._service],
      [['error', 'data', '_service'], carried?.error?.data?._service],
    ] as const) {
      if (!service || typeof service !== 'object') continue;
      const described = serviceMembers(schema, path);
      expect(
        Object.keys(service).filter((member) => !described.has(member)),
        `${label}: ${path.join('.')} members the document describes`,
      ).toEqual([]);
    }
    // A refusal carrying the caller's `_service` (their quota, their key) says no shared cache
    // may keep it for another caller (the document declares the Cache-Control it sends).
    if (res.status >= 400 && (carried?._service || carried?.error?.data?._service)) {
      expect(res.headers.get('cache-control'), `${label}: a per-caller answer says no-store`).toBe(
        'no-store',
      );
    }
    // A key the answer says it applied is one the operation's security has a generated client send.
    const auth = (json as { _service?: { auth?: { outcome?: string } } } | null)?._service?.auth;
    if (res.status < 300 && auth?.outcome === 'OK')
      expect(operation!.security ?? [], `${label}: security lists the Bearer key`).toContainEqual({
        apiKey: [],
      });
    // The document itself is its own example only in outline (its 200; a refusal is recorded whole).
    record(
      call.template === '/openapi.json' && res.status === 200
        ? { openapi: json.openapi, info: json.info }
        : json,
    );
    return json;
  }
  if (type === 'application/x-ndjson') {
    const lines = bytes
      .toString('utf8')
      .split('\n')
      .filter((l) => l !== '');
    const validate = validator(schema);
    for (const line of lines) {
      expect(validate(JSON.parse(line)), `${label}\n${line}\n${ajv.errorsText(validate.errors)}`).toBe(true);
    }
    record(JSON.parse(lines.at(-1)!));
    return lines;
  }
  if (type === 'application/vnd.apache.parquet') {
    expect(bytes.subarray(0, 4).toString('latin1')).toBe('PAR1');
    expect(schema).toMatchObject({ type: 'string', contentMediaType: 'application/vnd.apache.parquet' });
    return null;
  }
  expect(schema, label).toMatchObject({ type: 'string' });
  const text = bytes.toString('utf8');
  if (type === 'text/csv') expect(text.split('\n')[0], label).toMatch(/^[a-z0-9_]+(,[a-z0-9_]+)+$/);
  record(text);
  return text;
}

/** Every client-readable header the calls saw, to check the headers the issue named were met. */
const headersSeen: string[] = [];

/**
 * An MCP path's operations, one per method as it answers: a body only on POST (a generated
 * client would force one on GET, which fetch refuses), GET's 200 an event stream with its
 * headers, DELETE's 200 an empty answer; PUT and PATCH, which answer 405 alone, not listed (and
 * still answered 405). A session opened on the path is ended by a documented DELETE.
 */
async function methodsAsAnswered(template: string, headers: Record<string, string>): Promise<void> {
  const item = doc.paths[template]! as Record<string, Operation & { requestBody?: { required?: boolean } }>;
  expect(Object.keys(item).sort(), template).toEqual(['delete', 'get', 'post']);
  expect(item.post!.requestBody?.required, template).toBe(true);
  expect(item.get!.requestBody, template).toBeUndefined();
  expect(item.delete!.requestBody, template).toBeUndefined();
  const stream = item.get!.responses['200']!;
  expect(Object.keys(stream.content ?? {}), template).toEqual(['text/event-stream']);
  expect(Object.keys(stream.headers ?? {}), template).toEqual(
    expect.arrayContaining(['Cache-Control', 'X-Accel-Buffering', 'Mcp-Session-Id']),
  );
  expect(item.delete!.responses['200']!.content, template).toBeUndefined();
  for (const method of ['PUT', 'PATCH']) {
    const res = await fetch(`${url}${template}`, { method, headers });
    await res.arrayBuffer();
    expect(res.status, `${method} ${template}`).toBe(405);
    expect(res.headers.get('allow')).toBe('GET, POST, DELETE, OPTIONS');
  }
  const opened = await fetch(`${url}${template}`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(mcpInitialize('methods')),
  });
  await opened.arrayBuffer();
  const session = opened.headers.get('mcp-session-id')!;
  const ended = await conform({
    method: 'DELETE',
    template,
    headers: { ...headers, 'mcp-session-id': session },
    status: 200,
    ...(template === '/mcp' ? {} : { auth: false }),
  });
  expect(ended, template).toBeNull();
  expect(answered.get('content-type'), template).toBeNull();
}

const deep = `${'['.repeat(5_000)}${']'.repeat(5_000)}`;

describe('the OpenAPI document describes every real answer', () => {
  it('names its server', () => {
    expect(doc.servers?.[0]?.url).toBeTruthy();
  });

  it("passes Redocly's recommended rules without an error", async () => {
    const file = join(dir, 'openapi.json');
    await writeFile(file, JSON.stringify(doc));
    // Exit code 1 when there are errors: the report is read either way.
    const run = await promisify(execFile)('node_modules/.bin/redocly', ['lint', file, '--format=json'], {
      maxBuffer: 32 * 1024 * 1024,
    }).catch((err: { stdout: string }) => err);
    const report = JSON.parse(run.stdout) as {
      totals: { errors: number; warnings: number };
      problems: { ruleId: string; severity: string }[];
    };
    console.info(`redocly: ${report.totals.errors} errors, ${report.totals.warnings} warnings`);
    expect(report.problems.filter((p) => p.severity === 'error')).toEqual([]);
    expect(report.totals.errors).toBe(0);
  }, 60_000);

  it('discovery, operations and documentation', async () => {
    for (const template of [
      '/',
      '/openapi.json',
      '/healthz',
      '/readyz',
      '/.well-known/x402',
      '/.well-known/mcp.json',
      '/llms.txt',
      '/verify/sample',
      '/api/webhooks/schemas',
      '/track-record',
      '/mcp/server-card',
      '/.well-known/mcp/catalog.json',
      '/.well-known/ai-catalog.json',
    ]) {
      await conform({ method: 'GET', template, status: 200, auth: false });
    }
    // Public, and refusing a query parameter it does not take, as documented.
    await conform({
      method: 'GET',
      template: '/api/webhooks/schemas',
      path: '/api/webhooks/schemas?x=1',
      status: 400,
      auth: false,
    });
    const asset = '/track-record/assets/{file}';
    await conform({
      method: 'GET',
      template: asset,
      path: '/track-record/assets/uPlot.min.css',
      status: 200,
    });
    await conform({ method: 'GET', template: asset, path: '/track-record/assets/nope.js', status: 404 });
    // Where the knowledge tools' citations open: a document of the index, and a name that is none.
    const source = '/knowledge/{file}';
    await conform({
      method: 'GET',
      template: source,
      path: '/knowledge/errors.md',
      status: 200,
      auth: false,
    });
    await conform({
      method: 'GET',
      template: source,
      path: '/knowledge/..%2fpackage.json',
      status: 404,
      auth: false,
    });
    await conform({ method: 'GET', template: '/metrics', status: 200, auth: false });
  });

  it('pay-per-call routes with a key, and their refusals', async () => {
    const bodies: Record<string, unknown> = {
      get_trade_call: { coin: 'BTC', timeframe: '1h' },
      get_market_regime: { coin: 'BTC', timeframe: '4h' },
      scan_trade_calls: { timeframe: '1h', topN: 3 },
      scan_funding_arb: { limit: 3 },
      get_risk_forecast: { coin: 'BTC', timeframe: '1h' },
      get_track_record: { window: '30d' },
    };
    for (const [tool, body] of Object.entries(bodies)) {
      const template = `/x402/${tool}`;
      await conform({ method: 'POST', template, body, status: 200 });
      await conform({ method: 'POST', template, body, status: 402, auth: false });
      await conform({ method: 'POST', template, body: { nonsense: 1 }, status: 400 });
      await conform({
        method: 'POST',
        template,
        body,
        status: 401,
        headers: { authorization: `Bearer sk_live_${'A'.repeat(43)}` },
        auth: false,
      });
    }
    // Each refusal in the code its status declares: a coin no venue lists, a body the tool's
    // schema refuses (the risk budget too), Content-Type twice, a string body as text/plain, and a
    // payment header that is not one (402 with a fresh quote and the reason).
    for (const tool of ['get_trade_call', 'get_market_regime', 'get_risk_forecast']) {
      const template = `/x402/${tool}`;
      const refused = await conform({
        method: 'POST',
        template,
        body: { coin: 'NOPECOIN', timeframe: '1h' },
        status: 404,
      });
      expect(refused, template).toMatchObject({ code: 'unknown_coin' });
    }
    const paid = '/x402/get_risk_forecast';
    const forecast = { coin: 'BTC', timeframe: '1h' };
    await conform({ method: 'POST', template: paid, body: { ...forecast, riskBudgetUsd: 250 }, status: 200 });
    for (const body of [
      { ...forecast, riskBudgetUsd: -5 },
      { ...forecast, riskBudget: 5 },
    ]) {
      const refused = await conform({ method: 'POST', template: paid, body, status: 400 });
      expect(refused).toMatchObject({ code: 'invalid_input' });
    }
    await conform({
      method: 'POST',
      template: '/x402/get_track_record',
      body: { window: 'nope' },
      status: 400,
    });
    const twice = await conform({
      method: 'POST',
      template: paid,
      body: forecast,
      headers: { 'content-type': 'application/json, application/json' },
      status: 400,
    });
    expect(twice).toMatchObject({ code: 'invalid_content_type' });
    const text = await conform({
      method: 'POST',
      template: paid,
      raw: JSON.stringify(forecast),
      headers: { 'content-type': 'text/plain' },
      status: 400,
    });
    expect(text).toMatchObject({ code: 'invalid_content_type' });
    for (const header of ['x-payment', 'payment-signature']) {
      const refused = await conform({
        method: 'POST',
        template: paid,
        body: forecast,
        headers: { [header]: 'not a payment' },
        status: 402,
        sends: ['PAYMENT-REQUIRED'],
        auth: false,
      });
      expect(refused, header).toMatchObject({ code: 'invalid_payment_header', x402Version: 1 });
    }
    // Over X402_BODY_LIMIT_BYTES: the transport's refusal, in `default` with its Cache-Control.
    const large = JSON.stringify({ coin: 'BTC', timeframe: '1h', pad: 'x'.repeat(70_000) });
    const refused = await conform({
      method: 'POST',
      template: '/x402/get_trade_call',
      raw: large,
      status: 413,
      anyRoute: true,
    });
    expect(refused).toMatchObject({ code: 'BODY_TOO_LARGE' });
  });

  it('verify, from the first verdict of a stream', async () => {
    const trade = (await conform({
      method: 'POST',
      template: '/x402/get_trade_call',
      body: { coin: 'ETH', timeframe: '1d' },
      status: 200,
    })) as { verify_url?: string; verifyUrl?: string };
    const url = new URL(String(trade.verify_url ?? trade.verifyUrl));
    const [, , stream] = url.pathname.split('/');
    await conform({
      method: 'GET',
      template: '/verify/{stream}/{revision}',
      path: `/verify/${stream}/0`,
      status: 200,
      auth: false,
    });
    await conform({
      method: 'GET',
      template: '/verify/{stream}/{revision}',
      path: `/verify/${stream}/x`,
      status: 400,
      auth: false,
    });
    await conform({
      method: 'GET',
      template: '/verify/{stream}/{revision}',
      path: `/verify/${stream}/999999`,
      status: 404,
      auth: false,
    });
  });

  it('search and chat', async () => {
    await conform({
      method: 'POST',
      template: '/api/search',
      body: { query: 'market regime', limit: 2 },
      status: 200,
    });
    await conform({ method: 'POST', template: '/api/search', body: { query: 'x' }, status: 400 });
    await conform({
      method: 'POST',
      template: '/api/search',
      body: { query: 'market regime' },
      status: 401,
      auth: false,
    });
    await conform({
      method: 'POST',
      template: '/api/chat',
      body: { question: 'What does a regime mean?' },
      status: 200,
    });
    await conform({ method: 'POST', template: '/api/chat', body: { question: '' }, status: 400 });
    await conform({ method: 'POST', template: '/api/chat', raw: deep, status: 400 });
    // The transport's refusals in the route's own codes (contract 7.1), with the transport's
    // status, each declared by the operation itself (its 413 and 400, not `default`).
    const pad = 'x'.repeat(70_000);
    for (const [template, body, tooLong, invalid] of [
      ['/api/search', { query: 'market regime', pad }, 'QUERY_TOO_LONG', 'INVALID_QUERY'],
      ['/api/chat', { question: 'What does a regime mean?', pad }, 'QUESTION_TOO_LONG', 'INVALID_QUESTION'],
    ] as const) {
      const large = await conform({ method: 'POST', template, body, status: 413 });
      expect(large, template).toMatchObject({
        code: tooLong,
        message: 'the request body is over this route’s limit of 65536 bytes',
      });
      const twice = await conform({
        method: 'POST',
        template,
        body: { query: 'market regime', question: 'What does a regime mean?' },
        secondAuthorization: `Bearer ${key}`,
        status: 400,
      });
      expect(twice, template).toMatchObject({
        code: invalid,
        message: 'the Authorization header was sent more than once; send it exactly once',
      });
    }
  });

  it('history in every format, and its refusals', async () => {
    const template = '/api/verdicts';
    await conform({ method: 'GET', template, path: `${template}?format=ndjson&limit=5`, status: 200 });
    await conform({ method: 'GET', template, path: `${template}?limit=5&trailer=true`, status: 200 });
    await conform({ method: 'GET', template, path: `${template}?format=csv&limit=5`, status: 200 });
    await conform({ method: 'GET', template, path: `${template}?format=parquet&limit=5`, status: 200 });
    await conform({ method: 'GET', template, path: `${template}?limit=0`, status: 400 });
    await conform({ method: 'GET', template, path: `${template}?format=xml`, status: 400 });
    await conform({ method: 'GET', template, path: `${template}?coin=BTC&coin=ETH`, status: 400 });
    await conform({ method: 'GET', template, path: `${template}?colour=red`, status: 400 });
    // exchange and call are read in any case (as the route's description says); timeframe exactly.
    await conform({ method: 'GET', template, path: `${template}?call=buy&limit=1`, status: 200 });
    await conform({
      method: 'GET',
      template,
      path: `${template}?exchange=binance_spot&limit=1`,
      status: 200,
    });
    for (const [query, code] of [
      ['call=maybe', 'INVALID_CALL'],
      ['exchange=nowhere', 'INVALID_EXCHANGE'],
      ['timeframe=15M', 'INVALID_TIMEFRAME'],
    ]) {
      const refused = await conform({ method: 'GET', template, path: `${template}?${query}`, status: 400 });
      expect(refused, query).toMatchObject({ code });
    }
    await conform({ method: 'GET', template, path: `${template}?call=BUY&limit=1`, status: 200 });
    // The format by Accept, as by format=; a cursor not issued here, or naming a position this
    // store does not hold; a trailer a format has no place for; a wait or a time out of range.
    for (const accept of [
      'text/csv',
      'application/vnd.apache.parquet',
      'application/x-ndjson; profile="trailer"',
    ]) {
      await conform({
        method: 'GET',
        template,
        path: `${template}?limit=2`,
        headers: { accept },
        status: 200,
      });
    }
    const foreign = Buffer.from('h2:999999999:abcdefabcdef').toString('base64url');
    for (const [query, code, accept] of [
      ['after=garbage', 'INVALID_CURSOR'],
      [`after=${foreign}`, 'FOREIGN_CURSOR'],
      ['limit=2', 'UNSUPPORTED_FORMAT', 'application/xml'],
      ['format=csv&trailer=true', 'UNSUPPORTED_FORMAT'],
      ['wait=99', 'INVALID_WAIT'],
      ['from=notatime', 'INVALID_TIME'],
    ]) {
      const refused = await conform({
        method: 'GET',
        template,
        path: `${template}?${query}`,
        ...(accept ? { headers: { accept } } : {}),
        status: 400,
      });
      expect(refused, `${query} ${accept ?? ''}`).toMatchObject({ code });
    }
    await conform({ method: 'GET', template, path: `${template}?coin=NOPECOIN`, status: 404 });
    await conform({ method: 'GET', template, status: 401, auth: false });
    await conform({ method: 'GET', template: '/api/track-record', status: 200, auth: false });
    await conform({
      method: 'GET',
      template: '/api/track-record',
      path: '/api/track-record?window=nope',
      status: 400,
      auth: false,
    });
  });

  it('sign-in, and its refusals', async () => {
    const { nonce, domain } = (await conform({
      method: 'GET',
      template: '/api/keys/nonce',
      status: 200,
      auth: false,
    })) as { nonce: string; domain: string };
    const account = privateKeyToAccount(generatePrivateKey());
    const message = createSiweMessage({
      domain,
      address: account.address,
      statement: 'Sign in to get a free API key.',
      uri: `https://${domain}/`,
      version: '1',
      chainId: 8453,
      nonce,
      issuedAt: new Date(),
      expirationTime: new Date(Date.now() + 5 * 60_000),
    });
    const signIn = { message, signature: await account.signMessage({ message }) };
    await conform({ method: 'POST', template: '/api/keys', body: signIn, status: 201, auth: false });
    // The nonce is spent: the same message again is refused.
    await conform({ method: 'POST', template: '/api/keys', body: signIn, status: 401, auth: false });
    await conform({
      method: 'POST',
      template: '/api/keys',
      body: { message: 'x' },
      status: 400,
      auth: false,
    });
    await conform({ method: 'POST', template: '/api/keys', raw: deep, status: 400, auth: false });
  });

  it('MCP', async () => {
    const headers = { accept: 'application/json, text/event-stream' };
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} };
    await conform({ method: 'POST', template: '/mcp', body: list, headers, status: 200 });
    const resources = { jsonrpc: '2.0', id: 2, method: 'resources/list', params: {} };
    await conform({ method: 'POST', template: '/mcp', body: resources, headers, status: 200 });
    await conform({ method: 'POST', template: '/mcp', raw: deep, headers, status: 400 });
    await conform({ method: 'POST', template: '/mcp', raw: '', headers, status: 400 });
    await conform({ method: 'GET', template: '/mcp', headers, status: 400 });
    await methodsAsAnswered('/mcp', { ...headers, authorization: `Bearer ${key}` });
    await conform({
      method: 'DELETE',
      template: '/mcp',
      headers: { ...headers, 'mcp-session-id': 'nope' },
      status: 404,
    });
    await conform({
      method: 'POST',
      template: '/mcp',
      body: list,
      headers: { ...headers, 'mcp-session-id': 'nope' },
      status: 404,
    });
  });

  it("says /mcp answers a refused key's every request with its JSON-RPC error, initialize included", () => {
    const answered = doc.paths['/mcp']!.post!.responses['200']!.description;
    for (const code of ['unknown_key', 'key_unverifiable'] as const) {
      expect(answered).toContain(`${ERRORS[code].rpc} (data.code ${code}`);
    }
    expect(answered).toMatch(/initialize/);
  });

  it('webhook management, happy and refused', async () => {
    await conform({ method: 'GET', template: '/api/webhooks', status: 200 });
    await conform({ method: 'GET', template: '/api/webhooks', status: 401, auth: false });
    await conform({ method: 'GET', template: '/api/webhooks', path: '/api/webhooks?foo=1', status: 400 });
    await conform({
      method: 'GET',
      template: '/api/webhooks',
      path: '/api/webhooks?status=all',
      status: 200,
    });
    await conform({ method: 'GET', template: '/api/webhooks', path: '/api/webhooks?status=x', status: 400 });
    await conform({
      method: 'POST',
      template: '/api/webhooks',
      body: { url: 'http://example.com/hook', events: ['trade_call'] },
      status: 400,
    });
    await conform({
      method: 'POST',
      template: '/api/webhooks',
      body: { url: 'https://example.com/hook', events: ['nope'] },
      status: 400,
    });
    const created = (await conform({
      method: 'POST',
      template: '/api/webhooks',
      body: { url: 'https://127.0.0.1:9/hook', events: ['trade_call'], assets: ['BTC'] },
      status: 201,
    })) as { id: string };
    const id = created.id;
    // [method, template, the path after /api/webhooks/<id>, status, body]
    const table: [string, string, string, number, unknown?][] = [
      ['GET', '/api/webhooks/{id}/deliveries', '/deliveries?limit=5', 200],
      ['GET', '/api/webhooks/{id}/deliveries', '/deliveries?after_seq=0', 200],
      ['GET', '/api/webhooks/{id}/deliveries', '/deliveries?limit=0', 400],
      ['POST', '/api/webhooks/{id}/rotate-secret', '/rotate-secret', 200, { overlap_seconds: 60 }],
      ['POST', '/api/webhooks/{id}/rotate-secret', '/rotate-secret', 400, { overlap_seconds: -1 }],
      ['PATCH', '/api/webhooks/{id}', '', 200, { assets: ['ETH'] }],
      ['PATCH', '/api/webhooks/{id}', '', 400, {}],
      ['POST', '/api/webhooks/{id}/disable', '/disable', 200],
      ['POST', '/api/webhooks/{id}/disable', '/disable', 400, { reason: 'x' }],
      ['POST', '/api/webhooks/{id}/enable', '/enable', 200],
      ['POST', '/api/webhooks/{id}/deliveries/{deliveryId}/resend', '/deliveries/nope/resend', 404],
      // Nothing listens on the subscribed port: the attempt is reported, not refused.
      ['POST', '/api/webhooks/{id}/test', '/test', 200],
      ['DELETE', '/api/webhooks/{id}', '', 200],
      ['DELETE', '/api/webhooks/{id}', '', 404],
      ['POST', '/api/webhooks/{id}/test', '/test', 404],
      ['PATCH', '/api/webhooks/{id}', '', 404, { min_confidence: 60 }],
      ['POST', '/api/webhooks/{id}/disable', '/disable', 404],
    ];
    for (const [method, template, suffix, status, body] of table) {
      await conform({
        method,
        template,
        path: `/api/webhooks/${id}${suffix}`,
        status,
        ...(body ? { body } : {}),
      });
    }
    // Refusals in the codes each operation declares (on a second subscription, after the first's
    // answers are recorded as the examples): a body not JSON or nested too deep (on every
    // method that reads one, DELETE included), a parameter given twice, a coin no venue lists, a
    // URL the SSRF guard refuses, a recovery from the future.
    const second = (await conform({
      method: 'POST',
      template: '/api/webhooks',
      body: { url: 'https://127.0.0.1:9/hook', events: ['trade_call'] },
      status: 201,
    })) as { id: string };
    const refusals: [string, string, string, number, string, Partial<Call>][] = [
      ['POST', '/api/webhooks', '', 400, 'INVALID_JSON', { raw: '{' }],
      [
        'POST',
        '/api/webhooks',
        '',
        400,
        'INVALID_URL',
        { body: { url: 'https://10.0.0.1/h', events: ['trade_call'] } },
      ],
      [
        'POST',
        '/api/webhooks',
        '',
        404,
        'unknown_coin',
        { body: { url: 'https://127.0.0.1:9/h', events: ['trade_call'], assets: ['NOPECOIN'] } },
      ],
      [
        'POST',
        '/api/webhooks',
        '',
        400,
        'INVALID_FIELD',
        { body: { url: 'https://127.0.0.1:9/h', events: ['trade_call'], event_version: 3 } },
      ],
      ['GET', '/api/webhooks', '?status=all&status=all', 400, 'INVALID_PARAMETER', {}],
      ['DELETE', '/api/webhooks/{id}', `/${second.id}`, 400, 'JSON_TOO_DEEP', { raw: deep }],
      ['PATCH', '/api/webhooks/{id}', `/${second.id}`, 400, 'INVALID_JSON', { raw: '{' }],
      ['PATCH', '/api/webhooks/{id}', `/${second.id}`, 400, 'INVALID_FIELD', { body: { event_version: 1 } }],
      [
        'PATCH',
        '/api/webhooks/{id}',
        `/${second.id}`,
        400,
        'UNKNOWN_FILTER',
        { body: { min_confidence: 1 }, path: `/api/webhooks/${second.id}?x=1` },
      ],
      [
        'PATCH',
        '/api/webhooks/{id}',
        `/${second.id}`,
        404,
        'unknown_coin',
        { body: { assets: ['NOPECOIN'] } },
      ],
      ['POST', '/api/webhooks/{id}/disable', `/${second.id}/disable`, 400, 'INVALID_FIELD', { raw: '[]' }],
      [
        'POST',
        '/api/webhooks/{id}/enable',
        `/${second.id}/enable`,
        400,
        'INVALID_FIELD',
        { body: { recover_since: '2099-01-01T00:00:00Z' } },
      ],
      [
        'POST',
        '/api/webhooks/{id}/rotate-secret',
        `/${second.id}/rotate-secret`,
        400,
        'JSON_TOO_DEEP',
        { raw: deep },
      ],
      ['POST', '/api/webhooks/{id}/test', `/${second.id}/test`, 400, 'INVALID_JSON', { raw: '{' }],
      [
        'GET',
        '/api/webhooks/{id}/deliveries',
        `/${second.id}/deliveries?limit=1&limit=2`,
        400,
        'INVALID_PARAMETER',
        {},
      ],
      [
        'POST',
        '/api/webhooks/{id}/deliveries/{deliveryId}/resend',
        `/${second.id}/deliveries/x/resend`,
        400,
        'INVALID_JSON',
        { raw: '{' },
      ],
    ];
    for (const [method, template, suffix, status, code, call] of refusals) {
      const refused = await conform({ method, template, path: `/api/webhooks${suffix}`, status, ...call });
      expect(refused, `${method} ${template}`).toMatchObject({ code });
    }
  });

  it('OAuth sign-in for MCP: metadata, registration, consent without a browser, tokens, revocation', async () => {
    const none = { auth: false } as const;
    // As a host finds it: the resource (and its origin, PUBLIC_BASE_URL) from its own metadata.
    const { resource } = (await conform({
      method: 'GET',
      template: '/.well-known/oauth-protected-resource/mcp/signin',
      status: 200,
      ...none,
    })) as { resource: string };
    for (const template of [
      '/.well-known/oauth-authorization-server',
      '/oauth/jwks',
      '/mcp/signin/server-card',
    ]) {
      await conform({ method: 'GET', template, status: 200, ...none });
    }

    // Dynamic registration (RFC 7591), and reading the client back (RFC 7592).
    const redirectUri = 'http://127.0.0.1:9/callback';
    const client = (await conform({
      method: 'POST',
      template: '/oauth/register',
      body: {
        client_name: 'conformance host',
        redirect_uris: [redirectUri],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      },
      status: 201,
      ...none,
    })) as { client_id: string; registration_access_token: string };
    await conform({
      method: 'POST',
      template: '/oauth/register',
      body: { redirect_uris: ['not a url'] },
      status: 400,
      ...none,
    });
    const read = '/oauth/register/{clientId}';
    await conform({
      method: 'GET',
      template: read,
      path: `/oauth/register/${client.client_id}`,
      headers: { authorization: `Bearer ${client.registration_access_token}` },
      status: 200,
      ...none,
    });
    await conform({
      method: 'GET',
      template: read,
      path: `/oauth/register/${client.client_id}`,
      headers: { authorization: 'Bearer nope' },
      status: 401,
      sends: ['www-authenticate'],
      ...none,
    });

    const pkce = () => {
      const verifier = randomBytes(32).toString('base64url');
      return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
    };
    const authorization = (challenge: string | undefined, extra: Record<string, string> = {}) => {
      const params: Record<string, string> = {
        response_type: 'code',
        client_id: client.client_id,
        redirect_uri: redirectUri,
        scope: 'mcp offline_access',
        state: randomBytes(8).toString('hex'),
        resource,
        code_challenge_method: 'S256',
        ...(challenge ? { code_challenge: challenge } : {}),
        ...extra,
      };
      return params;
    };
    const local = (location: string | null) => {
      const to = new URL(location!, url);
      return `${to.pathname}${to.search}`;
    };
    /** Starts an authorization request the way the host's browser does; returns its interaction uid. */
    const start = async (jar: CookieJar, challenge: string) => {
      await conform({
        method: 'GET',
        template: '/oauth/authorize',
        path: `/oauth/authorize?${new URLSearchParams(authorization(challenge))}`,
        jar,
        status: 303,
        sends: ['location'],
        ...none,
      });
      const page = local(answered.get('location'));
      expect(page).toMatch(/^\/oauth\/interaction\/[^/]+$/);
      await conform({
        method: 'GET',
        template: '/oauth/interaction/{uid}',
        path: page,
        jar,
        status: 200,
        ...none,
      });
      return page.split('/').at(-1)!;
    };
    /** Back through /oauth/authorize/{uid} to the host's redirect URI; returns the code. */
    const resume = async (jar: CookieJar) => {
      const back = local(answered.get('location'));
      expect(back).toMatch(/^\/oauth\/authorize\/[^/]+$/);
      await conform({
        method: 'GET',
        template: '/oauth/authorize/{uid}',
        path: back,
        jar,
        status: 303,
        sends: ['location'],
        ...none,
      });
      return new URL(answered.get('location')!).searchParams;
    };

    // Refusals before any consent: a redirect URI that is not registered (a page, no redirect),
    // no PKCE challenge (back to the host with the error).
    await conform({
      method: 'GET',
      template: '/oauth/authorize',
      path: `/oauth/authorize?${new URLSearchParams(authorization(pkce().challenge, { redirect_uri: `${redirectUri}/x` }))}`,
      status: 400,
      ...none,
    });
    await conform({
      method: 'GET',
      template: '/oauth/authorize',
      path: `/oauth/authorize?${new URLSearchParams(authorization(undefined))}`,
      // As a generated client asks (the browser's Accept gets the HTML line instead).
      headers: { accept: 'application/json' },
      status: 303,
      sends: ['location'],
      ...none,
    });
    expect(new URL(answered.get('location')!).searchParams.get('error')).toBe('invalid_request');
    await conform({
      method: 'GET',
      template: '/oauth/authorize/{uid}',
      path: '/oauth/authorize/nope',
      status: 400,
      ...none,
    });
    await conform({
      method: 'GET',
      template: '/oauth/interaction/{uid}',
      path: '/oauth/interaction/nope',
      status: 400,
      ...none,
    });

    // Consent with the API key, as the page's form posts it.
    const first = pkce();
    const jar = new CookieJar();
    const uid = await start(jar, first.challenge);
    const keyStep = {
      method: 'POST',
      template: '/oauth/interaction/{uid}/key',
      path: `/oauth/interaction/${uid}/key`,
      jar,
      ...none,
    };
    await conform({ ...keyStep, form: { api_key: '' }, status: 400 });
    await conform({ ...keyStep, form: { api_key: `sk_live_${'A'.repeat(43)}` }, status: 401 });
    await conform({ ...keyStep, form: { api_key: key }, status: 303, sends: ['location'] });
    const code = (await resume(jar)).get('code')!;
    expect(code).toBeTruthy();

    const token = '/oauth/token';
    const exchange = {
      grant_type: 'authorization_code',
      client_id: client.client_id,
      code,
      redirect_uri: redirectUri,
      resource,
    };
    await conform({
      method: 'POST',
      template: token,
      form: { ...exchange, code_verifier: pkce().verifier },
      status: 400,
      ...none,
    });
    const tokens = (await conform({
      method: 'POST',
      template: token,
      form: { ...exchange, code_verifier: first.verifier },
      status: 200,
      ...none,
    })) as { access_token: string; refresh_token: string };
    await conform({
      method: 'POST',
      template: token,
      form: { ...exchange, client_id: 'nobody', code_verifier: first.verifier },
      status: 401,
      ...none,
    });

    // /mcp/signin as the signed-in key, and its refusals.
    const mcp = { accept: 'application/json, text/event-stream' };
    const signedIn = { ...mcp, authorization: `Bearer ${tokens.access_token}` };
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} };
    const signin = '/mcp/signin';
    await conform({ method: 'POST', template: signin, body: list, headers: signedIn, status: 200, ...none });
    await conform({
      method: 'POST',
      template: signin,
      body: list,
      headers: mcp,
      status: 401,
      sends: ['www-authenticate'],
      ...none,
    });
    expect(answered.get('www-authenticate')).toContain(
      `resource_metadata="${new URL(resource).origin}/.well-known/oauth-protected-resource/mcp/signin"`,
    );
    await conform({
      method: 'POST',
      template: signin,
      body: list,
      headers: { ...mcp, authorization: 'Bearer nope' },
      status: 401,
      sends: ['www-authenticate'],
      ...none,
    });
    expect(answered.get('www-authenticate')).toContain('error="invalid_token"');
    await conform({
      method: 'POST',
      template: signin,
      body: list,
      headers: signedIn,
      secondAuthorization: `Bearer ${tokens.access_token}`,
      status: 400,
      sends: ['www-authenticate'],
      ...none,
    });
    expect(answered.get('www-authenticate')).toContain('error="invalid_request"');
    await conform({ method: 'GET', template: signin, headers: signedIn, status: 400, ...none });
    await methodsAsAnswered(signin, signedIn);
    await conform({
      method: 'DELETE',
      template: signin,
      headers: { ...signedIn, 'mcp-session-id': 'nope' },
      status: 404,
      ...none,
    });
    await conform({
      method: 'GET',
      template: signin,
      headers: mcp,
      status: 401,
      sends: ['www-authenticate'],
      ...none,
    });

    // Revocation (RFC 7009): the refresh token ends the grant, the access token with it.
    const revoke = '/oauth/revoke';
    await conform({
      method: 'POST',
      template: revoke,
      form: { client_id: 'nobody', token: tokens.refresh_token },
      status: 401,
      ...none,
    });
    await conform({
      method: 'POST',
      template: revoke,
      form: { token: tokens.refresh_token },
      status: 400,
      ...none,
    });
    await conform({
      method: 'POST',
      template: revoke,
      form: { client_id: client.client_id, token: tokens.refresh_token, token_type_hint: 'refresh_token' },
      status: 200,
      ...none,
    });
    await conform({
      method: 'POST',
      template: signin,
      body: list,
      headers: signedIn,
      status: 401,
      sends: ['www-authenticate'],
      ...none,
    });
    await conform({
      method: 'POST',
      template: token,
      form: {
        grant_type: 'refresh_token',
        client_id: client.client_id,
        refresh_token: tokens.refresh_token,
        resource,
      },
      status: 400,
      ...none,
    });

    // Consent with a wallet (EIP-4361 signed here, as the page's wallet would), then the key choice.
    const walletJar = new CookieJar();
    const walletUid = await start(walletJar, pkce().challenge);
    const step = (name: string) => ({
      method: 'POST',
      template: `/oauth/interaction/{uid}/${name}`,
      path: `/oauth/interaction/${walletUid}/${name}`,
      jar: walletJar,
      ...none,
    });
    await conform({ ...step('choose'), form: { key_id: 'nope' }, status: 401 });
    await conform({ ...step('wallet'), form: { message: '' }, status: 400 });
    // The page's own nonce, on the sign-in budget; none once the interaction is gone.
    await conform({
      method: 'GET',
      template: '/oauth/interaction/{uid}/nonce',
      path: '/oauth/interaction/nope/nonce',
      status: 400,
      ...none,
    });
    const { nonce, domain } = (await conform({
      method: 'GET',
      template: '/oauth/interaction/{uid}/nonce',
      path: `/oauth/interaction/${walletUid}/nonce`,
      jar: walletJar,
      status: 200,
      ...none,
    })) as { nonce: string; domain: string };
    const account = privateKeyToAccount(generatePrivateKey());
    const message = createSiweMessage({
      domain,
      address: account.address,
      statement: 'Sign in to let an MCP host act as one of your API keys.',
      uri: `${url}/`,
      version: '1',
      chainId: 1,
      nonce,
      issuedAt: new Date(),
    });
    const signature = await account.signMessage({ message });
    await conform({ ...step('wallet'), form: { message, signature: `0x${'00'.repeat(65)}` }, status: 401 });
    // The page now lists the wallet's keys (its free key, issued at this first sign-in).
    const chosen = await conform({ ...step('wallet'), form: { message, signature }, status: 200 });
    await conform({ ...step('choose'), form: { key_id: 'nope' }, status: 400 });
    const keyId = /name="key_id" value="([^"]+)"/.exec(String(chosen))?.[1];
    expect(keyId).toBeTruthy();
    await conform({ ...step('choose'), form: { key_id: keyId! }, status: 303, sends: ['location'] });
    expect((await resume(walletJar)).get('code')).toBeTruthy();

    // Denied: the host is told access_denied.
    const deniedJar = new CookieJar();
    const deniedUid = await start(deniedJar, pkce().challenge);
    const abort = '/oauth/interaction/{uid}/abort';
    await conform({
      method: 'POST',
      template: abort,
      path: '/oauth/interaction/nope/abort',
      status: 400,
      ...none,
    });
    await conform({
      method: 'POST',
      template: abort,
      path: `/oauth/interaction/${deniedUid}/abort`,
      jar: deniedJar,
      status: 303,
      sends: ['location'],
      ...none,
    });
    expect((await resume(deniedJar)).get('error')).toBe('access_denied');
  });

  it('documents the rate limit, the session, the history cursor and the payment headers where they are sent', async () => {
    const issued = await issueKey(running.service.adapters.eventStore, {
      plan: 'starter',
      owner: 'test',
      via: 'operator',
    });
    const starter = { authorization: `Bearer ${issued.key}` };
    // The starter plan's budget here is 2 calls a window: called until it is spent (a call before
    // the key is folded in is limited by address, and answers 401).
    await expect
      .poll(async () => (await fetch(`${url}/api/webhooks`, { headers: starter })).status)
      .toBe(429);
    // Each limited operation declares the 429 (not only `default`), with Retry-After and Cache-Control.
    for (const [method, template, body] of [
      ['GET', '/api/webhooks'],
      ['GET', '/api/track-record'],
      ['GET', '/openapi.json'],
      ['GET', '/verify/sample'],
      ['GET', '/api/webhooks/schemas'],
      ['GET', '/api/keys/nonce'],
      ['POST', '/x402/get_trade_call', { coin: 'BTC', timeframe: '1h' }],
    ] as const) {
      const refused = await conform({
        method,
        template,
        ...(body ? { body } : {}),
        headers: starter,
        auth: false,
        status: 429,
      });
      expect(refused, template).toMatchObject({ code: 'RATE_LIMITED' });
      expect(answered.get('retry-after'), template).toMatch(/^\d+$/);
      expect(answered.get('cache-control'), template).toBe('no-store');
    }
    // On an operation that declares a 429 of its own (the quota's), the rate limit's answer is in it too.
    await conform({
      method: 'POST',
      template: '/api/search',
      body: { query: 'confidence' },
      headers: starter,
      auth: false,
      status: 429,
      anyRoute: true,
    });
    const initialize = mcpInitialize('conformance');
    const mcp = { accept: MCP_ACCEPT };
    await conform({ method: 'POST', template: '/mcp', body: initialize, headers: mcp, status: 200 });
    expect(answered.get('mcp-session-id')).toBeTruthy();
    for (const name of [
      'ratelimit-limit',
      'ratelimit-remaining',
      'ratelimit-reset',
      'retry-after',
      'cache-control',
      'vary',
      'x-history-cursor',
      'mcp-session-id',
    ])
      expect(headersSeen, name).toContain(name);
    // A paid answer's headers (settlement, replay) need a chain: x402-payer-safety checks a
    // replayed paid answer's headers against the document; here every paid route declares them.
    for (const [path, item] of Object.entries(doc.paths).filter(([path]) => path.startsWith('/x402/')))
      expect(Object.keys(item.post!.responses['200']!.headers ?? {}), path).toEqual(
        expect.arrayContaining(['PAYMENT-RESPONSE', 'X-PAYMENT-RESPONSE', 'x-payment-replayed']),
      );
  });

  // After the rate limit's test: the examples recorded for search's 429 stay the rate limit's.
  it('answers a key whose quota is spent, and a search it already has, as documented', async () => {
    // The free plan's day: 100 calls (its 429 is the quota's, with the quote to pay instead).
    const free = await running.issue('free');
    const spent = { authorization: `Bearer ${free}` };
    const regime = { coin: 'BTC', timeframe: '4h' };
    let served = 0;
    while (served <= 100) {
      const res = await fetch(`${url}/x402/get_market_regime`, {
        method: 'POST',
        headers: { ...spent, 'content-type': 'application/json' },
        body: JSON.stringify(regime),
      });
      await res.arrayBuffer();
      if (res.status !== 200) break;
      served++;
    }
    expect(served).toBe(100);
    const quota = await conform({
      method: 'POST',
      template: '/x402/get_market_regime',
      body: regime,
      headers: spent,
      auth: false,
      status: 429,
      sends: ['Retry-After', 'PAYMENT-REQUIRED'],
    });
    expect(quota).toMatchObject({ code: 'quota_exhausted', x402Version: 1 });
    for (const [template, body, code] of [
      ['/api/search', { query: 'market regime' }, 'QUOTA_EXHAUSTED'],
      ['/api/chat', { question: 'What does a regime mean?' }, 'QUOTA_EXHAUSTED'],
    ] as const) {
      const refused = await conform({
        method: 'POST',
        template,
        body,
        headers: spent,
        auth: false,
        status: 429,
      });
      expect(refused, template).toMatchObject({ code });
    }
    // A search answered again from its ETag: 304, no body.
    await conform({ method: 'POST', template: '/api/search', body: { query: 'market regime' }, status: 200 });
    const etag = answered.get('etag');
    expect(etag).toBeTruthy();
    await conform({
      method: 'POST',
      template: '/api/search',
      body: { query: 'market regime' },
      headers: { 'if-none-match': etag! },
      status: 304,
    });
  });

  it('answers HEAD and OPTIONS, which no operation lists, as `default` says, where Allow lists them', async () => {
    // A 405's Allow names HEAD beside GET and OPTIONS on the paths pages may call, yet neither is an
    // operation: `default` must say what they answer, or a client reads 200 and 204 as undocumented.
    const keyed = { authorization: `Bearer ${key}` };
    const seen = new Set<string>();
    for (const [template, method] of [
      ['/healthz', 'get'],
      ['/api/webhooks', 'get'],
      ['/verify/sample', 'get'],
      ['/x402/get_trade_call', 'post'],
      ['/api/search', 'post'],
    ] as const) {
      const description = String(doc.paths[template]![method]!.responses.default?.description);
      const refused = await fetch(`${url}${template}`, { method: 'PUT', headers: keyed });
      await refused.arrayBuffer();
      expect(refused.status, template).toBe(405);
      const allow = (refused.headers.get('allow') ?? '').split(', ');
      if (allow.includes('HEAD')) {
        const [head, get] = await Promise.all(
          ['HEAD', 'GET'].map((m) => fetch(`${url}${template}`, { method: m, headers: keyed })),
        );
        expect(head!.status, template).toBe(get!.status);
        expect((await head!.arrayBuffer()).byteLength, template).toBe(0);
        await get!.arrayBuffer();
        expect(description, template).toMatch(/HEAD, on a path that takes GET, as GET is/);
        seen.add('HEAD');
      }
      if (allow.includes('OPTIONS')) {
        const preflight = await fetch(`${url}${template}`, {
          method: 'OPTIONS',
          headers: { origin: 'https://page.example', 'access-control-request-method': 'POST' },
        });
        expect(preflight.status, template).toBe(204);
        expect(preflight.headers.get('access-control-allow-origin'), template).toBeTruthy();
        expect(description, template).toMatch(/OPTIONS, the CORS preflight, 204/);
        seen.add('OPTIONS');
      }
    }
    expect([...seen].sort()).toEqual(['HEAD', 'OPTIONS']);
  });

  it("answers 404 and 405 with the caller's `_service` and no-store, as `default` declares", async () => {
    // 404 and 405 are cacheable by default (RFC 9110 §15.1): without no-store a shared cache may
    // serve one caller's quota to the next caller of the same URL.
    const keyed = { authorization: `Bearer ${key}` };
    const answers: [string, string, Response][] = [];
    for (const [method, path, template] of [
      ['GET', '/api/nope', undefined],
      ['GET', '/nope', undefined],
      ['PUT', '/api/webhooks', '/api/webhooks'],
      ['DELETE', '/api/search', '/api/search'],
      ['PUT', '/x402/get_trade_call', '/x402/get_trade_call'],
      ['PUT', '/mcp', '/mcp'],
    ] as const) {
      const res = await fetch(`${url}${path}`, { method, headers: keyed });
      answers.push([`${method} ${path}`, template ?? '', res]);
    }
    for (const [label, template, res] of answers) {
      const body = (await res.json()) as { _service?: unknown; error?: { data?: { _service?: unknown } } };
      expect(res.status, label).toBe(label.startsWith('GET') ? 404 : 405);
      expect(body._service ?? body.error?.data?._service, label).toBeDefined();
      expect(res.headers.get('cache-control'), label).toBe('no-store');
      if (template === '') continue;
      const item = doc.paths[template]! as Record<string, Operation>;
      for (const operation of Object.values(item)) {
        expect(undeclaredHeaders(operation.responses.default, res.headers), label).toEqual([]);
      }
    }
  });

  it('called every operation of the document', () => {
    const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
    );
    expect(operations.filter((operation) => !called.has(operation))).toEqual([]);
  });

  it('gives every operation an example from a real answer, valid against its schema and of its shape', () => {
    expect(existsSync(EXAMPLES_FILE), 'RECORD_OPENAPI_EXAMPLES=1 writes the examples').toBe(true);
    const missing: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        const examples = Object.entries(operation.responses).flatMap(([status, response]) =>
          Object.entries(response.content ?? {})
            .filter(([, media]) => media.example !== undefined)
            .map(([type, media]) => ({ status, type, ...media })),
        );
        const label = `${method.toUpperCase()} ${path}`;
        if (examples.length === 0 && !RECORD) missing.push(label);
        for (const { status, type, schema, example } of examples) {
          const validate = validator(schema ?? {});
          const json =
            type === 'application/json' || type.endsWith('+json') || type === 'application/x-ndjson';
          if (json)
            expect(validate(example), `${label} ${status}: ${ajv.errorsText(validate.errors)}`).toBe(true);
          else expect(typeof example, `${label} ${status}`).toBe('string');
          // The example has the shape of this run's real answer (the same members).
          const real = recorded[operation.operationId!]?.[status]?.body;
          if (json && real && typeof real === 'object' && !Array.isArray(real) && path !== '/openapi.json') {
            expect(Object.keys(example as object).sort(), `${label} ${status}`).toEqual(
              Object.keys(real).sort(),
            );
          }
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it('serves every recorded example naming the origin it is served from, not the recording run’s', async () => {
    const served = JSON.stringify(await (await fetch(`${url}/openapi.json`)).json());
    for (const other of ['recorded.example', 'localhost:8080', 'localhost%3A8080', '127.0.0.1:43503']) {
      expect(served.includes(other), other).toBe(false);
    }
    const oauth = (await (await fetch(`${url}/openapi.json`)).json()) as {
      paths: Record<string, { get: Operation }>;
    };
    const metadata = oauth.paths['/.well-known/oauth-authorization-server']!.get.responses['200']!.content![
      'application/json'
    ]!.example as { issuer: string; jwks_uri: string };
    expect(metadata.issuer).toBe(url);
    expect(metadata.jwks_uri).toBe(`${url}/oauth/jwks`);
    // The bazaar example of a 402 and of /.well-known/x402: its verify link on this origin.
    const quote = await fetch(`${url}/x402/get_trade_call`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '1h' }),
    });
    expect(quote.status).toBe(402);
    const required = JSON.parse(
      Buffer.from(quote.headers.get('payment-required')!, 'base64').toString('utf8'),
    );
    const manifest = (await (await fetch(`${url}/.well-known/x402`)).json()) as {
      resources: { tool: string; extensions: { bazaar: unknown } }[];
    };
    const bazaars = [
      required.extensions.bazaar,
      manifest.resources.find((r) => r.tool === 'get_trade_call')!.extensions.bazaar,
    ];
    for (const bazaar of bazaars) {
      const verify = /"verifyUrl":"([^"]+)"/.exec(JSON.stringify(bazaar))?.[1];
      expect(verify).toMatch(new RegExp(`^${url}/verify/`));
    }
  });

  it('gives every time of an answer (a member named *_at or *At) the date-time format', () => {
    // Webhook payloads keep the shapes their versions were published with (contracts/webhook-schemas.unit.test.ts).
    const plain = documentMembers()
      .filter(({ path }) => path.startsWith('#/paths'))
      .filter(({ name, types }) => /(_at|At)$/.test(name) && types.includes('string'))
      .filter(({ formats }) => !formats.includes('date-time'));
    expect(plain.map(({ path, name }) => `${path} ${name}`)).toEqual([]);
  });

  it('says the members of every object a member holds (no bare {type: object}, itself or as its items)', () => {
    const bare = (schema: Json | undefined) =>
      schema?.type === 'object' &&
      ['properties', 'additionalProperties', 'anyOf', 'oneOf', 'allOf', '$ref'].every((k) => !(k in schema));
    const untyped = documentMembers().filter(
      ({ schema }) => bare(schema) || (schema.type === 'array' && bare(schema.items as Json | undefined)),
    );
    expect(untyped.map(({ path, name }) => `${path} ${name}`)).toEqual([]);
  });

  it('gives every duration in milliseconds (a member named *_ms) the integer type', () => {
    const fractional = documentMembers().filter(
      ({ name, types }) => name.endsWith('_ms') && types.includes('number'),
    );
    expect(fractional.map(({ path, name }) => `${path} ${name}`)).toEqual([]);
  });

  it('documents every code of the error catalog on the operations that answer it', () => {
    const paths = JSON.stringify(doc.paths);
    const undocumented = Object.keys(ERRORS).filter((code) => !new RegExp(`\\b${code}\\b`).test(paths));
    expect(undocumented).toEqual([]);
  });
});
