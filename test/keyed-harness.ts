import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { Cache } from '../adapters/cache/port.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { openReplayFeed } from '../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import type { Plan } from '../contracts/events.ts';
import { buildApp } from '../services/api/app.ts';
import type { ToolDefinition } from '../services/api/mcp/tool-registry.ts';
import { keyedChannel } from '../services/api/plugins.ts';
import { createSignalEngine, type SignalEngine } from '../services/engine/engine.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { Readiness } from '../services/shared/readiness.ts';
import { trackRecordSlice } from './track-record-slice.ts';

export const PAYMENT_REQUIRED = {
  x402Version: 2,
  resource: { url: 'mcp://tool/get_trade_call', mimeType: 'application/json' },
  accepts: [
    {
      scheme: 'exact',
      network: 'eip155:8453',
      amount: '20000',
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      payTo: '0x0000000000000000000000000000000000000001',
      maxTimeoutSeconds: 120,
      extra: { name: 'USD Coin', version: '2' },
    },
  ],
};

/**
 * The api role's keyed channel on a real port: real engine over the replayed market data, real
 * projection runner, the given cache (real Redis in the suites), in-memory event store.
 */
export async function startKeyedServer(options: {
  cache: Cache;
  env?: Record<string, string>;
  sweepIntervalMs?: number;
  engine?: SignalEngine;
  /** Register the request-rate limiter in front of the routes, as the service does. */
  rateLimited?: boolean;
  /** Listen on this port (0: any free one); a server that names its own URL (OAuth's issuer) needs it fixed. */
  port?: number;
  /** Tools served beside the signal tools (a test's own). */
  extraTools?: ToolDefinition[];
  /** The event log: a restart test hands the next server the log the last one wrote (its keys). */
  eventStore?: MemoryEventStore;
  /** false: no call is sold per call (no x402 requirements to quote), as where payments are off. */
  payPerCall?: boolean;
}) {
  const config = loadConfig({ EVENT_STORE: 'memory', NODE_ENV: 'test', LOG_LEVEL: 'silent', ...options.env });
  const logger = pino({ level: 'silent' });
  const store = options.eventStore ?? new MemoryEventStore();
  const ownEngine = options.engine === undefined;
  const engine =
    options.engine ?? (await createSignalEngine({ feed: await openReplayFeed({ run: false }), store }));
  const projectionStore = new MemoryProjectionStore();
  const history = await trackRecordSlice(config, store, projectionStore, engine.feed);
  const channel = keyedChannel({
    config,
    adapters: { eventStore: store, projectionStore, cache: options.cache },
    logger,
    ops: history.withTrackRecord(engine),
    ...(options.payPerCall === false ? {} : { paymentRequirements: () => PAYMENT_REQUIRED }),
    ...(options.sweepIntervalMs === undefined ? {} : { mcpSweepIntervalMs: options.sweepIntervalMs }),
    ...(options.extraTools ? { extraTools: options.extraTools } : {}),
  });
  await channel.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [
      channel.callers,
      ...(options.rateLimited && channel.rateLimit ? [channel.rateLimit] : []),
      ...channel.plugins,
    ],
  });
  await app.listen({ host: '127.0.0.1', port: options.port ?? 0 });
  const { port } = app.server.address() as AddressInfo;
  return {
    app,
    store,
    engine,
    channel,
    config,
    port,
    url: `http://127.0.0.1:${port}`,
    async issue(plan: Plan, owner = 'test') {
      const issued = await issueKey(store, { plan, owner, via: 'operator' });
      await channel.registry.waitFor(issued.position);
      return issued;
    },
    async close() {
      await app.close();
      await channel.stop();
      await history.stop();
      if (ownEngine) await engine.close();
    },
  };
}
