import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { foldLog } from '../projections/projection.ts';
import { revokeKey } from '../services/keys/key-commands.ts';
import { webhookProjection } from '../services/webhooks/webhook-projection.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)("a revoked key's subscriptions", () => {
  let stack: WebhookStack;
  let revokedEndpoint: Receiver;
  let control: Receiver;

  beforeAll(async () => {
    // Retries 1 s apart: one is pending when the key is revoked, and due well inside the wait.
    stack = await startWebhookStack({
      env: { WEBHOOK_RETRY_SCHEDULE: '1000,1000,1000,1000,1000' },
      settings: { tls: { ca: tls.cert } },
    });
    revokedEndpoint = await startReceiver(tls);
    revokedEndpoint.behave = () => ({ status: 500 });
    control = await startReceiver(tls);
  });
  afterAll(async () => {
    await stack?.close();
    await revokedEndpoint?.close();
    await control?.close();
  });

  it('receive nothing once the revocation is recorded: no new event, no pending retry, no notice', async () => {
    const { key, keyId } = await stack.issueWithId('revoked-owner');
    const other = await stack.issue('other-owner');
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: revokedEndpoint.url,
      events: ['trade_call'],
      assets: ['REVA'],
    });
    expect(created.status).toBe(201);
    // The same key's notice subscription: a revocation sends it nothing either.
    const notice = await stack.request('POST', '/api/webhooks', key, {
      url: revokedEndpoint.url,
      events: ['subscription_disabled'],
    });
    expect(notice.status).toBe(201);
    const controlSub = await stack.request('POST', '/api/webhooks', other, {
      url: control.url,
      events: ['trade_call'],
      assets: ['REVA'],
    });
    expect(controlSub.status).toBe(201);

    await appendVerdict(stack.store, { coin: 'REVA', call: 'BUY', confidence: 70 });
    await revokedEndpoint.waitFor(1);
    await control.waitFor(1);

    const position = await revokeKey(stack.store, `apikey-${keyId}`, keyId, 'leaked');
    await stack.dispatcher.runner.waitFor(position);
    await stack.api.runner.waitFor(position);
    const sent = revokedEndpoint.received.length;

    await appendVerdict(stack.store, { coin: 'REVA', call: 'SELL', confidence: 80 });
    await control.waitFor(2);
    // Past every retry the schedule had left for the first delivery.
    await new Promise((r) => setTimeout(r, 5_000));
    expect(revokedEndpoint.received).toHaveLength(sent);

    const subs = stack.dispatcher.runner.state.subscriptions.subs;
    for (const id of [created.body.id, notice.body.id]) {
      expect(subs[id]).toMatchObject({ status: 'disabled', disabledReason: 'key_revoked' });
    }
    expect(subs[controlSub.body.id]).toMatchObject({ status: 'active' });
    // Nothing attempted after the revocation: no attempt of the key's subscription is later than it.
    const revokedAt = Date.parse(stack.dispatcher.runner.state.subscriptions.revokedKeys[keyId]!);
    const attempts = Object.values(stack.dispatcher.runner.state.log.deliveries)
      .filter((d) => d.subscriptionId === created.body.id || d.subscriptionId === notice.body.id)
      .flatMap((d) => d.attempts);
    expect(attempts.length).toBeGreaterThan(0);
    expect(attempts.filter((a) => Date.parse(a.attemptedAt) > revokedAt)).toEqual([]);
    // The key itself is refused, as before.
    expect((await stack.request('GET', '/api/webhooks', key)).status).toBe(401);

    // A restart folds the same: the revocation is in the log, not in a dispatcher's memory.
    const refolded = (await foldLog(stack.store, webhookProjection)).state.subscriptions.subs;
    expect(refolded[created.body.id]).toMatchObject({ status: 'disabled', disabledReason: 'key_revoked' });
  });
});
