import { afterAll, beforeAll } from 'vitest';
import { dispatcherPool, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

/**
 * A webhook stack with no dispatcher of its own, a TLS receiver, and a pool of dispatchers a test
 * starts late, so that the one it starts lags behind the log as a busy one does. Registers its
 * beforeAll and afterAll in the calling describe; `stack` and `receiver` are set once it has run.
 */
export function laggingDispatcherStack(tag: string) {
  const tls = selfSignedCert();
  const env = { WEBHOOK_RETRY_SCHEDULE: '0' };
  const settings = { tls: { ca: tls.cert } };
  const setup = {} as { stack: WebhookStack; receiver: Receiver; pool: ReturnType<typeof dispatcherPool> };
  setup.pool = dispatcherPool(() => setup.stack, { tag, env, settings });
  beforeAll(async () => {
    setup.stack = await startWebhookStack({ env, settings, dispatcher: false });
    setup.receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await setup.pool.stopAll();
    await setup.stack?.close();
    await setup.receiver?.close();
  });
  return setup;
}
