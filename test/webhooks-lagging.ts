import { pooledDispatcherStack } from './webhooks-harness.ts';

/**
 * A webhook stack with no dispatcher of its own, a TLS receiver, and a pool of dispatchers a test
 * starts late, so that the one it starts lags behind the log as a busy one does. Registers its
 * beforeAll and afterAll in the calling describe; `stack` and `receiver` are set once it has run.
 */
export function laggingDispatcherStack(tag: string) {
  return pooledDispatcherStack(tag, { env: { WEBHOOK_RETRY_SCHEDULE: '0' }, startDispatcher: false });
}
