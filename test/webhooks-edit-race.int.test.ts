import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrList, parsePortPolicy } from '../contracts/setting-lists.ts';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';

/**
 * Two PATCHes of one subscription, the first still checking its new url's name while the second
 * is recorded. The first was merged from what it read before that check: recorded over the second,
 * it would put back the field the second changed. The resolver stands in for DNS and answers the
 * slow name only when the test lets it, so the order is the test's, not the clock's.
 */
describe('a PATCH whose url check waits while another PATCH is recorded', () => {
  let stack: WebhookStack;
  let key: string;
  let reached: () => void = () => undefined;
  let release: () => void = () => undefined;
  const resolving = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });

  beforeAll(async () => {
    stack = await startWebhookStack({
      bus: 'memory',
      dispatcher: false,
      settings: {
        urlPolicy: {
          ports: parsePortPolicy('*'),
          addresses: { allow: parseCidrList('127.0.0.1/32') },
          resolve: async (host) => {
            if (host === 'slow.example.com') {
              reached();
              await released;
            }
            return ['127.0.0.1'];
          },
        },
      },
    });
    key = await stack.issue('edit-race');
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('keeps the change recorded meanwhile (merged again on it, not written over it)', async () => {
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: 'https://127.0.0.1:9/a',
      events: ['trade_call'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.id as string;

    const moving = stack.request('PATCH', `/api/webhooks/${id}`, key, {
      url: 'https://slow.example.com:9/b',
    });
    await resolving;
    const raised = await stack.request('PATCH', `/api/webhooks/${id}`, key, { min_confidence: 80 });
    expect(raised.status, JSON.stringify(raised.body)).toBe(200);
    release();
    const moved = await moving;
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);

    const listed = await stack.request('GET', '/api/webhooks?status=all', key);
    const sub = listed.body.webhooks.find((w: { id: string }) => w.id === id);
    expect(sub).toMatchObject({ url: 'https://slow.example.com:9/b', min_confidence: 80 });
  });
});
