import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * What /mcp says of itself on the wire: initialize names the package's version (package.json, the
 * one place it is set).
 */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe('/mcp on the wire: its version', () => {
  let server: Server;
  let url: string;

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    url = `${server.url}/mcp`;
  });
  afterAll(async () => {
    await server?.close();
  });

  it("initialize names the package's version (the SDK client reads it)", async () => {
    const client = new Client({ name: 'version-reader', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      expect(client.getServerVersion()).toMatchObject({ name: 'signal-service', version: PACKAGE_VERSION });
    } finally {
      await client.close();
    }
  });
});
