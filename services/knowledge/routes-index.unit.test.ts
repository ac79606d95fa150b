import Fastify from 'fastify';
import { validatorCompiler } from 'fastify-type-provider-zod';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import { documented, registerOpenApi } from '../api/openapi.ts';
import type { KeyedAccess } from '../metering/caller.ts';
import { knowledgeModule } from './module.ts';

describe('the route list in the index comes from the app’s OpenAPI document', () => {
  const app = Fastify({ logger: false });
  const module = knowledgeModule({
    config: loadConfig({ NODE_ENV: 'test' }),
    adapters: {
      eventStore: new MemoryEventStore(),
      projectionStore: new MemoryProjectionStore(),
      cache: new MemoryCache(),
    },
    logger: pino({ level: 'silent' }),
    channel: (): KeyedAccess => {
      throw new Error('no request is served here');
    },
  });
  afterAll(async () => {
    await app.close();
    await module.stop();
  });

  it('indexes the registered routes once the app is ready, and the ETag changes with them', async () => {
    // As the service's app does (services/api/app.ts): route schemas are zod contracts.
    app.setValidatorCompiler(validatorCompiler);
    await registerOpenApi(app, { title: 'test', version: '0', description: 'test' });
    await app.register(module.plugin);
    await app.register(async (scope) => {
      scope.get(
        '/api/brand-new-export',
        {
          config: documented({
            summary: 'Export of the brand-new ledger, as NDJSON',
            tags: ['ledger'],
            auth: 'bearer',
            responses: { 200: { description: 'rows' } },
          }),
        },
        async () => '',
      );
    });
    await module.start();
    const knowledge = await module.ready;
    const before = knowledge.etag('brand-new ledger export', 5);
    expect(knowledge.index.get('contract#routes')).toBeUndefined();

    await app.ready();
    const after = knowledge.etag('brand-new ledger export', 5);
    expect(after).not.toBe(before);
    const overview = knowledge.index.get('contract#routes')!;
    for (const route of [
      'POST /api/search',
      'POST /api/chat',
      'GET /openapi.json',
      'GET /api/brand-new-export',
    ]) {
      expect(overview.text).toContain(route);
    }
    expect(overview.text).toContain('GET /api/brand-new-export (requires the header Authorization: Bearer');
    expect(knowledge.index.get('contract#routes-ledger')!.text).toBe(
      'GET /api/brand-new-export: Export of the brand-new ledger, as NDJSON; requires the header Authorization: Bearer <API_KEY>.',
    );
    expect(knowledge.search('brand-new ledger export', 3).results[0]!.id).toBe('contract#routes-ledger');
  });
});
