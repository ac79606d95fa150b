import { request as httpRequest } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Bad input on every public and keyed GET and POST operation of /openapi.json (all but the MCP
 * transports, which speak JSON-RPC), on the api role: every answer must be a status the operation
 * documents (or a refusal its `default` lists), in a media type documented for that status, valid
 * against the schema given for it, never a 5xx, never a stack or a path of ours.
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

describe('hostile input drawn from the OpenAPI document', () => {
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
