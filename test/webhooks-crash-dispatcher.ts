/**
 * Child process for the crash test: a dispatcher alone, over the parent's LMDB log and NATS
 * stream. Prints {"ready":true} once consuming; the parent SIGKILLs it mid-delivery.
 *
 *   webhooks-crash-dispatcher.ts <lmdb path> <nats stream> <subject prefix> <ca file>
 */
import { readFileSync } from 'node:fs';
import { pino } from 'pino';
import { connectNatsBus } from '../adapters/bus/nats.ts';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { openReplayFeed } from '../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { dispatcherComponent } from '../services/webhooks/component.ts';
import { NATS_URL } from './nats-server.ts';
import { webhookEnv } from './webhooks-harness.ts';

const [path, stream, prefix, caFile] = process.argv.slice(2);
if (!path || !stream || !prefix || !caFile) {
  process.stderr.write('usage: webhooks-crash-dispatcher.ts <lmdb path> <stream> <prefix> <ca file>\n');
  process.exit(2);
}
const logger = pino({ level: 'silent' });
const config = loadConfig(
  webhookEnv(prefix, { WEBHOOK_STUCK_AFTER_MS: '1000', WEBHOOK_TIMEOUT_MS: '60000' }),
);
const store = await openLmdbEventStore({ path, pollMs: 50 });
const bus = await connectNatsBus({
  url: NATS_URL,
  stream,
  subjectPrefix: prefix,
  logger,
  pullExpiresMs: 2_000,
});
// The dispatcher's consumers take the bus's ack wait, JetStream's 30 s. A message the killed
// dispatcher had taken and not acked yet (a delivery waiting for one of the endpoint's 4 slots,
// all hanging) comes back only once it ran out, so the test waited 30 s for the last delivery.
// Shortened here as WEBHOOK_STUCK_AFTER_MS is above: the same redelivery, 5 s after the crash.
const consume = bus.consume.bind(bus);
bus.consume = (options, handler) => consume({ ackWaitMs: 5_000, ...options }, handler);
const feed = await openReplayFeed({ run: false });
const dispatcher = dispatcherComponent({
  config,
  adapters: { eventStore: store, projectionStore: new MemoryProjectionStore(), bus },
  logger,
  feed,
  durablePrefix: `crash${prefix}`,
  settings: { tls: { ca: readFileSync(caFile, 'utf8') } },
});
await dispatcher.start();
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
process.on('SIGTERM', () => {
  void dispatcher.stop().then(() => process.exit(0));
});
