import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERRORS, RpcErrorBody } from '../contracts/errors.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * The rate limit's refusal (RATE_LIMITED, 429) as the OpenAPI document declares it and as the
 * service answers it: every member of the answer is a declared property (retry_after_ms, the
 * window's reset in ms beside Retry-After in whole seconds, among them), and the answer is valid.
 */
type Schema = { properties?: Record<string, unknown>; required?: string[] };
type Doc = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema?: Schema }> }> }>
  >;
};

const PATH = '/api/webhooks/schemas';
let running: TestService;
let doc: Doc;
beforeAll(async () => {
  running = await startTestService(['api'], { RATE_LIMIT_ENABLED: 'true', RATE_LIMIT_ANONYMOUS: '3' });
  // Fetched first: the document's own route is limited too.
  doc = (await (await fetch(`${running.service.url}/openapi.json`)).json()) as Doc;
});
afterAll(async () => {
  await running?.stop();
});

describe('RATE_LIMITED: the document and the answer', () => {
  it('declares every member of the real 429 answer, retry_after_ms required, and the answer validates', async () => {
    let refused: Response | undefined;
    for (let i = 0; i < 10 && refused === undefined; i++) {
      const res = await fetch(`${running.service.url}${PATH}`);
      if (res.status === ERRORS.RATE_LIMITED.status) refused = res;
      else await res.arrayBuffer();
    }
    expect(refused, 'a 429 within 10 calls of a limit of 3').toBeDefined();
    const body = (await refused!.json()) as Record<string, unknown>;
    expect(body.code).toBe('RATE_LIMITED');
    const schema = doc.paths[PATH]!.get!.responses['429']!.content!['application/json']!.schema!;
    expect(Object.keys(body).filter((name) => !(name in (schema.properties ?? {})))).toEqual([]);
    expect(schema.required).toContain('retry_after_ms');
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    const validate = ajv.compile(schema);
    expect(validate(body), ajv.errorsText(validate.errors)).toBe(true);
    // Retry-After is the same wait in whole seconds.
    expect(Number(refused!.headers.get('retry-after'))).toBe(
      Math.ceil((body.retry_after_ms as number) / 1_000),
    );
  });

  it("declares every member of /mcp's real -32000 data, in the document and in RpcErrorBody", async () => {
    let refused: Response | undefined;
    for (let i = 0; i < 10 && refused === undefined; i++) {
      const res = await fetch(`${running.service.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'ping' }),
      });
      if (res.status === ERRORS.RATE_LIMITED.status) refused = res;
      else await res.arrayBuffer();
    }
    expect(refused, 'a 429 within 10 calls of a limit of 3').toBeDefined();
    const body = (await refused!.json()) as { error: { code: number; data: Record<string, unknown> } };
    expect(body.error.code).toBe(ERRORS.RATE_LIMITED.rpc);
    const data = body.error.data;
    expect(data).toMatchObject({ code: 'RATE_LIMITED', retryable: true, retry_after_ms: expect.any(Number) });
    // The contract's shape of the data names each member (a loose object would take any).
    const declared = Object.keys(RpcErrorBody.shape.error.shape.data.unwrap().shape);
    expect(Object.keys(data).filter((name) => !declared.includes(name))).toEqual([]);
    // The document's: each member a property, the rate limit's own required, the answer valid.
    const schema = doc.paths['/mcp']!.post!.responses['429']!.content!['application/json']!.schema!;
    // The JSON-RPC branch of the 429's schema (the other is the catalog's {code, message}).
    const rpc = [schema, ...((schema as { anyOf?: Schema[] }).anyOf ?? [])].find(
      (one) => one.properties?.error,
    );
    const dataSchema = ((rpc?.properties?.error as Schema | undefined)?.properties?.data ?? {}) as Schema;
    expect(Object.keys(data).filter((name) => !(name in (dataSchema.properties ?? {})))).toEqual([]);
    expect(dataSchema.required).toEqual(expect.arrayContaining(['code', 'retryable', 'retry_after_ms']));
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    const validate = ajv.compile(schema);
    expect(validate(body), ajv.errorsText(validate.errors)).toBe(true);
    expect(Number(refused!.headers.get('retry-after'))).toBe(
      Math.ceil((data.retry_after_ms as number) / 1_000),
    );
  });

  it('declares retry_after_ms on every refusal schema whose codes take RATE_LIMITED', () => {
    const missing: string[] = [];
    for (const [path, item] of Object.entries(doc.paths))
      for (const [method, operation] of Object.entries(item))
        for (const [status, response] of Object.entries(operation.responses ?? {}))
          for (const [type, media] of Object.entries(response.content ?? {})) {
            const schemas = [media.schema, ...((media.schema as { anyOf?: Schema[] })?.anyOf ?? [])];
            for (const schema of schemas) {
              const code = schema?.properties?.code as { enum?: string[] } | undefined;
              if (code?.enum?.includes('RATE_LIMITED') && !('retry_after_ms' in (schema?.properties ?? {})))
                missing.push(`${method.toUpperCase()} ${path} ${status} ${type}`);
            }
          }
    expect(missing).toEqual([]);
  });
});
