import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * /llms.txt is what an agent, or a developer, holding only the origin reads first: besides the
 * tools and x402, it says where the keyed HTTP API is (the OpenAPI document, the free key, the
 * webhooks), and every address of the service it names is one the api role serves.
 */
describe('/llms.txt on the api role', () => {
  let running: TestService;
  let url: string;

  beforeAll(async () => {
    running = await startTestService(['api']);
    url = running.service.url;
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('names the OpenAPI document, the free key and the webhooks, and each address it names is served', async () => {
    const text = await (await fetch(`${url}/llms.txt`)).text();
    for (const path of [
      '/openapi.json',
      '/docs/',
      '/api/keys/nonce',
      '/api/keys',
      '/api/webhooks',
      '/api/webhooks/schemas',
      '/knowledge/README.md',
    ])
      expect(text).toContain(`${url}${path}`);

    for (const path of [
      '/openapi.json',
      '/docs/',
      '/api/keys/nonce',
      '/api/webhooks/schemas',
      '/knowledge/README.md',
    ])
      expect((await fetch(`${url}${path}`)).status, path).toBe(200);
    // Every other address of the service it names is a route the OpenAPI document declares.
    const openapi = (await (await fetch(`${url}/openapi.json`)).json()) as { paths: Record<string, object> };
    const named = [...text.matchAll(/https?:\/\/[^\s)<>,;]+/g)]
      .map((m) => m[0])
      .filter((u) => u.startsWith(url));
    // A path template (/knowledge/{file}) names its own template or any path it matches.
    const declares = (path: string) =>
      Object.keys(openapi.paths).some(
        (declared) =>
          declared === path ||
          new RegExp(
            `^${declared.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`,
          ).test(path),
      );
    for (const address of new Set(named)) {
      const path = decodeURI(new URL(address).pathname);
      if (path !== '/docs/') expect(declares(path), address).toBe(true);
    }
  });
});
