import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_VERSIONS } from '../contracts/webhook-schemas.ts';
import type { RunningService } from '../services/service.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * The OpenAPI document of a service running every role on the embedded defaults: valid OpenAPI
 * 3.1 by an independent validator, and listing exactly the routes the server has registered.
 */

type Operation = {
  responses: Record<
    string,
    { headers?: Record<string, unknown>; content?: Record<string, { schema?: unknown }> }
  >;
};

let running: TestService;
let service: RunningService;
let doc: {
  openapi: string;
  paths: Record<string, Record<string, unknown>>;
  webhooks: Record<string, unknown>;
};

beforeAll(async () => {
  // Rate limiting on, as `npm start` runs: every route, the reference page's too, goes through it.
  running = await startTestService(['api', 'engine', 'projections', 'dispatcher'], {
    RATE_LIMIT_ENABLED: 'true',
  });
  service = running.service;
  const res = await fetch(`${service.url}/openapi.json`);
  expect(res.status).toBe(200);
  doc = (await res.json()) as typeof doc;
});
afterAll(async () => {
  await running?.stop();
});

/** Method and path of every route, from Fastify's own route tree (`printRoutes`). */
function registeredRoutes(tree: string): Set<string> {
  const routes = new Set<string>();
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const match = /^([│ ]*)[├└]── (.+) \(([A-Z, ]+)\)$/.exec(line.replace(/\u00a0/g, ' '));
    if (!match) continue;
    const depth = match[1]!.length / 4;
    stack.length = depth;
    stack.push(match[2]!);
    const path = stack.join('').replace(/:([A-Za-z]+)/g, '{$1}');
    for (const method of match[3]!.split(', ')) routes.add(`${method} ${path}`);
  }
  return routes;
}

describe('OpenAPI document', () => {
  it('is valid OpenAPI 3.1', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const validator = new Validator();
    const result = await validator.validate(doc as unknown as Parameters<Validator['validate']>[0]);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it('lists every registered route and nothing else', () => {
    const registered = registeredRoutes(service.app.printRoutes({ commonPrefix: false }));
    // HEAD answers are Fastify's own for each GET, OPTIONS are CORS preflights, /docs* renders this
    // document, PUT and PATCH on the MCP paths are routed only to answer 405 with Allow.
    const served = [...registered]
      .filter(
        (r) =>
          !/^(HEAD|OPTIONS) /.test(r) && !/^GET \/docs/.test(r) && !/^(PUT|PATCH) \/mcp(\/signin)?$/.test(r),
      )
      .sort();
    const documented = Object.entries(doc.paths)
      .flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`))
      .sort();
    expect(served.length).toBeGreaterThan(30);
    expect(documented).toEqual(served);
  });

  it('documents request bodies, error bodies, security and the x402 quote from the contracts', () => {
    const search = doc.paths['/api/search']!.post as {
      security: unknown[];
      requestBody: { content: { 'application/json': { schema: { required: string[] } } } };
      responses: Record<string, unknown>;
    };
    expect(search.security).toEqual([{ apiKey: [] }]);
    expect(search.requestBody.content['application/json'].schema.required).toEqual(['query']);
    expect(Object.keys(search.responses)).toEqual(
      expect.arrayContaining(['200', '304', '400', '401', '429']),
    );
    const paid = doc.paths['/x402/get_trade_call']!.post as {
      security: unknown[];
      responses: Record<string, { headers?: Record<string, unknown> }>;
    };
    expect(paid.responses['402']!.headers).toHaveProperty('PAYMENT-REQUIRED');
    // Paid per call with nothing but the payment, or served from a Bearer key's plan.
    for (const [path, item] of Object.entries(doc.paths).filter(([p]) => p.startsWith('/x402/')))
      expect((item.post as { security: unknown[] }).security, path).toEqual([
        {},
        { x402: [] },
        { apiKey: [] },
      ]);
    expect(doc.paths['/verify/{stream}/{revision}']!.get).toMatchObject({
      parameters: expect.arrayContaining([expect.objectContaining({ name: 'revision', in: 'path' })]),
    });
  });

  it('says a request body is optional exactly where the route answers without one', () => {
    const optional = Object.entries(doc.paths)
      .flatMap(([path, item]) =>
        Object.entries(item as Record<string, { requestBody?: { required?: boolean } }>)
          .filter(([, op]) => op.requestBody && op.requestBody.required !== true)
          .map(([method]) => `${method.toUpperCase()} ${path}`),
      )
      .sort();
    expect(optional).toEqual(
      [
        'DELETE /api/webhooks/{id}',
        'POST /api/webhooks/{id}/deliveries/{deliveryId}/resend',
        'POST /api/webhooks/{id}/disable',
        'POST /api/webhooks/{id}/enable',
        'POST /api/webhooks/{id}/rotate-secret',
        'POST /api/webhooks/{id}/test',
      ].sort(),
    );
    expect(doc.paths['/api/search']!.post).toMatchObject({ requestBody: { required: true } });
  });

  it('declares the 429 of the rate limit, with Retry-After and Cache-Control, on every operation it limits', () => {
    const unlimited = ['/healthz', '/readyz', '/metrics'];
    const missing: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item as Record<string, Operation>)) {
        const refusal = op.responses['429'];
        const headers = Object.keys(refusal?.headers ?? {});
        const label = `${method.toUpperCase()} ${path}`;
        if (unlimited.includes(path)) expect(refusal, label).toBeUndefined();
        else if (!refusal || !headers.includes('Retry-After') || !headers.includes('Cache-Control'))
          missing.push(label);
      }
    }
    expect(missing).toEqual([]);
    // RATE_LIMITED on the product's budget; the sign-in paths' own budget answers temporarily_unavailable.
    expect(JSON.stringify(doc.paths['/verify/sample']!.get)).toContain('"RATE_LIMITED"');
    expect(JSON.stringify(doc.paths['/oauth/jwks']!.get)).toContain('"temporarily_unavailable"');
  });

  it('requires _service in every success that carries it', () => {
    const optional: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item as Record<string, Operation>)) {
        for (const [status, response] of Object.entries(op.responses).filter(([s]) => /^2/.test(s))) {
          for (const [type, media] of Object.entries(response.content ?? {})) {
            const schema = media.schema as { properties?: Record<string, unknown>; required?: string[] };
            if (schema?.properties?._service && !schema.required?.includes('_service'))
              optional.push(`${method.toUpperCase()} ${path} ${status} ${type}`);
          }
        }
      }
    }
    expect(optional).toEqual([]);
    expect(JSON.stringify(doc.paths['/api/search']!.post)).toContain('"_service"');
  });

  it('declares search and chat answering the transport’s refusals in their own codes (contract 7.1)', () => {
    const enumOf = (path: string, status: string) =>
      (
        (doc.paths[path]!.post as Operation).responses[status]?.content?.['application/json']?.schema as
          | { properties?: { code?: { enum?: string[] } } }
          | undefined
      )?.properties?.code?.enum;
    for (const [path, tooLong, invalid] of [
      ['/api/search', 'QUERY_TOO_LONG', 'INVALID_QUERY'],
      ['/api/chat', 'QUESTION_TOO_LONG', 'INVALID_QUESTION'],
    ] as const) {
      // A body over the limit: 413 with the text's too-long code alone, never BODY_TOO_LARGE.
      expect(enumOf(path, '413'), path).toEqual([tooLong]);
      // A repeated Authorization: 400 with the invalid-input code, beside the other 400s.
      expect(enumOf(path, '400'), path).toContain(invalid);
    }
  });

  it('lists the codes of every refusal it declares, so an answer in another code fails validation', () => {
    // A refusal schema whose `code` is any string lets a client (and the conformance test) take
    // any code; each declared status enumerates its own. Two stay open on purpose: `default`
    // (every code any route may answer) and the x402 402, whose reason may be a facilitator's
    // own, passed on as it is.
    const open: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item as Record<string, Operation>)) {
        for (const [status, response] of Object.entries(op.responses)) {
          if (status === 'default' || (status === '402' && path.startsWith('/x402/'))) continue;
          const schema = response.content?.['application/json']?.schema as
            | { properties?: { code?: { type?: string; enum?: string[] } } }
            | undefined;
          const code = schema?.properties?.code;
          if (code?.type === 'string' && !code.enum) open.push(`${method.toUpperCase()} ${path} ${status}`);
        }
      }
    }
    expect(open).toEqual([]);
    // Every command on a key's subscriptions may lose its append race past the retries (two api
    // replicas on one store): 409 CONFLICT, on each route that records one; a rotation's loss in
    // its own words, SECRET_ROTATION_RACED.
    for (const [method, path, code] of [
      ['post', '/api/webhooks', 'CONFLICT'],
      ['patch', '/api/webhooks/{id}', 'CONFLICT'],
      ['delete', '/api/webhooks/{id}', 'CONFLICT'],
      ['post', '/api/webhooks/{id}/disable', 'CONFLICT'],
      ['post', '/api/webhooks/{id}/enable', 'CONFLICT'],
      ['post', '/api/webhooks/{id}/rotate-secret', 'SECRET_ROTATION_RACED'],
    ] as const) {
      const conflict = (doc.paths[path]![method] as Operation).responses['409']?.content?.['application/json']
        ?.schema as { properties: { code: { enum: string[] } } } | undefined;
      expect(conflict?.properties.code.enum, `${method.toUpperCase()} ${path}`).toContain(code);
    }
  });

  it('carries the webhook payload of every event type and version', () => {
    expect(Object.keys(doc.webhooks).length).toBeGreaterThanOrEqual(4 * EVENT_VERSIONS.length);
    expect(Object.keys(doc.webhooks)).toContain('trade_call.v1');
  });

  it('names /mcp/signin in no description or summary of a service that serves none (OAUTH_ENABLED=false)', async () => {
    const off = await startTestService(['api'], { OAUTH_ENABLED: 'false' });
    try {
      const res = await fetch(`${off.service.url}/openapi.json`);
      const served = (await res.json()) as typeof doc;
      expect(Object.keys(served.paths)).not.toContain('/mcp/signin');
      const words: string[] = [];
      const walk = (node: unknown): void => {
        if (Array.isArray(node)) for (const item of node) walk(item);
        else if (node !== null && typeof node === 'object')
          for (const [name, value] of Object.entries(node)) {
            if ((name === 'description' || name === 'summary') && typeof value === 'string')
              words.push(value);
            else walk(value);
          }
      };
      walk(served);
      expect(words.filter((w) => w.includes('/mcp/signin'))).toEqual([]);
      // PUT and PATCH on /mcp are still said to answer 405 in JSON-RPC.
      expect(
        words.some((w) => w.includes('except PUT and PATCH on /mcp: 405 with a JSON-RPC error body')),
      ).toBe(true);
    } finally {
      await off.stop();
    }
    // With sign-in on, the same words name it.
    expect(JSON.stringify(doc)).toContain("after /mcp/signin's 401 for a missing or refused token");
  });

  it('is rendered at /docs from the package, with no CDN', async () => {
    const page = await fetch(`${service.url}/docs/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('/openapi.json');
    expect(html).not.toMatch(/https:\/\/cdn\./);
    const script = await fetch(`${service.url}/docs/js/scalar.js`);
    expect(script.status).toBe(200);
    expect((await script.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
  });
});
