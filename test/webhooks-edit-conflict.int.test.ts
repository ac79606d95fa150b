import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrList, parsePortPolicy } from '../contracts/setting-lists.ts';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';

/**
 * A PATCH that loses the race twice: its url check waits while another PATCH is recorded, it is
 * merged again on that one (its retry), and its retry's url check waits while a third is recorded.
 * The second loss is answered 409 CONFLICT over HTTP and nothing of the loser is written. The
 * resolver stands in for DNS and answers the slow name only when the test lets it, so the order is
 * the test's, not the clock's.
 */
describe('a PATCH that loses its race, and its retry too', () => {
  let stack: WebhookStack;
  let key: string;
  /** One gate per lookup of the slow name: reached when the lookup starts, released by the test. */
  type Gate = { reached: Promise<void>; arrive: () => void; released: Promise<void>; release: () => void };
  const gates: Gate[] = [];
  const gate = (n: number): Gate => {
    while (gates.length <= n) {
      const g = { arrive: () => undefined, release: () => undefined } as unknown as Gate;
      g.reached = new Promise<void>((resolve) => {
        g.arrive = resolve;
      });
      g.released = new Promise<void>((resolve) => {
        g.release = resolve;
      });
      gates.push(g);
    }
    return gates[n] as Gate;
  };
  let lookups = 0;

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
              const g = gate(lookups++);
              g.arrive();
              await g.released;
            }
            return ['127.0.0.1'];
          },
        },
      },
    });
    key = await stack.issue('edit-conflict');
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('answers 409 CONFLICT (retryable) and keeps both changes recorded meanwhile', async () => {
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: 'https://127.0.0.1:9/a',
      events: ['trade_call'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.id as string;

    const moving = stack.request('PATCH', `/api/webhooks/${id}`, key, {
      url: 'https://slow.example.com:9/b',
    });
    await gate(0).reached;
    const first = await stack.request('PATCH', `/api/webhooks/${id}`, key, { min_confidence: 80 });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    gate(0).release();
    // The retry reads the subscription again and checks the url again: it waits here.
    await gate(1).reached;
    const second = await stack.request('PATCH', `/api/webhooks/${id}`, key, { timeframes: ['1h'] });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    gate(1).release();

    const moved = await moving;
    expect(moved.status, JSON.stringify(moved.body)).toBe(409);
    expect(moved.body).toMatchObject({ code: 'CONFLICT' });
    expect(lookups).toBe(2);

    const listed = await stack.request('GET', '/api/webhooks?status=all', key);
    const sub = listed.body.webhooks.find((w: { id: string }) => w.id === id);
    expect(sub).toMatchObject({ url: 'https://127.0.0.1:9/a', min_confidence: 80, timeframes: ['1h'] });

    // Retried by the caller once nothing races it, the same PATCH is recorded over both.
    const again = stack.request('PATCH', `/api/webhooks/${id}`, key, { url: 'https://slow.example.com:9/b' });
    await gate(2).reached;
    gate(2).release();
    const retried = await again;
    expect(retried.status, JSON.stringify(retried.body)).toBe(200);
    expect(retried.body).toMatchObject({
      url: 'https://slow.example.com:9/b',
      min_confidence: 80,
      timeframes: ['1h'],
    });
  });
});
