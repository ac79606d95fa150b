import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * The OpenAPI document's examples are answers recorded from a service serving OAuth sign-in. One
 * that does not (OAUTH_ENABLED=false) answers without /mcp/signin, and its document's examples
 * name no sign-in either: the catalogs' examples list the entries it serves.
 */
type Doc = { paths: Record<string, Record<string, unknown>> };

/** Every example in the document, with where it is. */
function examples(doc: Doc): { at: string; example: unknown }[] {
  const found: { at: string; example: unknown }[] = [];
  const walk = (node: unknown, at: string): void => {
    if (Array.isArray(node)) for (const [i, item] of node.entries()) walk(item, `${at}/${i}`);
    else if (node !== null && typeof node === 'object')
      for (const [name, value] of Object.entries(node)) {
        if (name === 'example') found.push({ at, example: value });
        else walk(value, `${at}/${name}`);
      }
  };
  walk(doc.paths, '');
  return found;
}

const SIGN_IN = /signin|sign-in|oauth/i;
const CATALOGS = [
  ['/.well-known/mcp/catalog.json', 'application/json'],
  ['/.well-known/ai-catalog.json', 'application/ai-catalog+json'],
  ['/mcp/server-card', 'application/mcp-server-card+json'],
] as const;

let off: TestService;
let on: TestService;
const docs: Record<'off' | 'on', Doc> = {} as never;
beforeAll(async () => {
  [off, on] = await Promise.all([
    startTestService(['api'], { OAUTH_ENABLED: 'false' }),
    startTestService(['api'], { OAUTH_ENABLED: 'true' }),
  ]);
  for (const [name, svc] of [
    ['off', off],
    ['on', on],
  ] as const)
    docs[name] = (await (await fetch(`${svc.service.url}/openapi.json`)).json()) as Doc;
});
afterAll(async () => {
  await Promise.all([off?.stop(), on?.stop()]);
});

const exampleOf = (doc: Doc, path: string, type: string): unknown =>
  (
    doc.paths[path]?.get as
      | { responses: Record<string, { content?: Record<string, { example?: unknown }> }> }
      | undefined
  )?.responses['200']?.content?.[type]?.example;

describe('OpenAPI examples and OAuth sign-in', () => {
  it('names sign-in in no example of a service that serves none (OAUTH_ENABLED=false)', () => {
    expect(Object.keys(docs.off.paths)).not.toContain('/mcp/signin');
    const named = examples(docs.off)
      .filter(({ example }) => SIGN_IN.test(typeof example === 'string' ? example : JSON.stringify(example)))
      .map(
        ({ at, example }) =>
          `${at}: ${JSON.stringify(example).match(/.{0,60}(signin|sign-in|oauth).{0,60}/i)?.[0]}`,
      );
    expect(named).toEqual([]);
    // The examples that named it are kept, without it: llms.txt's lists /mcp.
    expect(exampleOf(docs.off, '/llms.txt', 'text/plain')).toMatch(/\/mcp\)/);
  });

  it("gives as the catalogs' and the server card's examples the answers of the service without sign-in", async () => {
    for (const [path, type] of CATALOGS) {
      const served = await (await fetch(`${off.service.url}${path}`)).json();
      expect(exampleOf(docs.off, path, type), path).toEqual(served);
    }
  });

  it('keeps the sign-in entries in the examples of a service that serves it', async () => {
    for (const [path, type] of CATALOGS) {
      expect(JSON.stringify(exampleOf(docs.on, path, type)), path).toContain('/mcp/signin');
      // The recorded answer's host is the test origin's; the entries are the served ones.
      const served = await (await fetch(`${on.service.url}${path}`)).json();
      expect(exampleOf(docs.on, path, type), path).toEqual(served);
    }
  });
});
