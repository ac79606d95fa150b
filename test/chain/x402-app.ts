import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { type Hex, toHex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { createMemoryCache } from '../../adapters/cache/memory.ts';
import type { Cache } from '../../adapters/cache/port.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { type Config, loadConfig } from '../../contracts/config.ts';
import { type DomainEvent, type Plan, parseDomainEvent } from '../../contracts/events.ts';
import { buildApp } from '../../services/api/app.ts';
import { discoveryPlugin } from '../../services/api/discovery/plugin.ts';
import { keyedChannel } from '../../services/api/plugins.ts';
import { createSignalEngine, type SignalEngine } from '../../services/engine/engine.ts';
import { type IssuedKey, issueKey } from '../../services/keys/key-commands.ts';
import { paymentStream } from '../../services/payments/payment-state.ts';
import { setupX402, type X402Setup } from '../../services/payments/setup.ts';
import { Readiness } from '../../services/shared/readiness.ts';
import { trackRecordSlice } from '../track-record-slice.ts';
import { BASE_USDC, FACILITATOR_KEY, type LocalChain, startLocalChain } from './local-chain.ts';

/**
 * The whole pay-per-call stack on real parts: anvil with our ERC-3009 token at the Base USDC
 * address, the in-process facilitator signing with an anvil key, the real signal engine over
 * the replayed market data, the memory event store, the keyed channel (key registry, quota on
 * the given cache, MCP) wired both ways as in the api role, and the HTTP app on a free port.
 */
export interface X402Stack {
  chain: LocalChain;
  store: EventStore;
  engine: SignalEngine;
  app: FastifyInstance;
  x402: X402Setup;
  keyed: ReturnType<typeof keyedChannel>;
  config: Config;
  url: string;
  payTo: Hex;
  /** Issues a key through the operator command and waits until the registry knows it. */
  issue(plan: Plan): Promise<IssuedKey>;
  /** The events of one payment, parsed, from its stream (payer and nonce on the configured rail). */
  paymentEvents(nonce: string, payer?: string): Promise<DomainEvent[]>;
  stop(): Promise<void>;
}

export async function startX402Stack(
  env: Record<string, string> = {},
  chain?: LocalChain,
  cache: Cache = createMemoryCache(),
  /**
   * A log shared with another stack: two replicas of one deployment (pass X402_PAY_TO too); or
   * another store than the in-memory one (LMDB, to close it under the service). `now`: the
   * reconciler's clock, moved on where a test would otherwise wait for a payment to age.
   */
  shared: { store?: EventStore; feed?: ReplayFeed; now?: () => number } = {},
): Promise<X402Stack> {
  const localChain = chain ?? (await startLocalChain());
  const payTo =
    (env.X402_PAY_TO as Hex | undefined) ??
    privateKeyToAccount(toHex(crypto.getRandomValues(new Uint8Array(32)))).address;
  const config = loadConfig({
    NODE_ENV: 'test',
    EVENT_STORE: 'memory',
    X402_PAY_TO: payTo,
    X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
    X402_RPC_URL: localChain.rpcUrl,
    X402_ASSET: BASE_USDC,
    X402_SETTLE_CONFIRM_TIMEOUT_MS: '10000',
    ...env,
  });
  const logger = pino({ level: 'silent' });
  const store = shared.store ?? new MemoryEventStore();
  const feed = shared.feed ?? (await openReplayFeed({ run: false }));
  const engine = await createSignalEngine({ feed, store, logger });
  const projectionStore = new MemoryProjectionStore();
  const history = await trackRecordSlice(config, store, projectionStore, feed);
  const ops = history.withTrackRecord(engine);
  const x402 = (await setupX402(config, {
    ops,
    store,
    logger,
    cache,
    ...(shared.now ? { now: shared.now } : {}),
  }))!;
  const keyed = keyedChannel({
    config,
    adapters: { eventStore: store, projectionStore, cache },
    logger,
    ops,
    ...x402.mcp,
  });
  await keyed.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [
      keyed.callers,
      ...keyed.plugins,
      x402.plugin({ keys: keyed.keys, quota: keyed.quota }),
      discoveryPlugin({
        tools: keyed.tools.all(),
        paid: x402.tools,
        rails: x402.rails,
        paidResponseTtlMs: config.X402_PAID_RESPONSE_TTL_MS,
      }),
    ],
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    chain: localChain,
    store,
    engine,
    app,
    x402,
    keyed,
    config,
    url,
    payTo,
    async issue(plan) {
      const issued = await issueKey(store, { plan, owner: 'test', via: 'operator' });
      await keyed.registry.waitFor(issued.position);
      return issued;
    },
    async paymentEvents(nonce, payer) {
      // Without a payer: the one payment on the rail with this nonce (tests use fresh random nonces).
      const streams = new Set<string>();
      if (payer) {
        streams.add(paymentStream({ network: config.X402_NETWORK, asset: config.X402_ASSET, payer, nonce }));
      } else {
        for (const e of await store.readAll({ after: 0, maxCount: 100_000 })) {
          const data = e.data as { nonce?: string };
          if (e.stream.startsWith('payment-') && data.nonce?.toLowerCase() === nonce.toLowerCase()) {
            streams.add(e.stream);
          }
        }
      }
      if (streams.size > 1) throw new Error(`${streams.size} payment streams for nonce ${nonce}`);
      if (streams.size === 0) return [];
      return (await store.readStream([...streams][0]!)).map((e) => parseDomainEvent(e)!);
    },
    async stop() {
      await app.close();
      await keyed.stop();
      await x402.stop();
      await history.stop();
      await engine.close();
      if (!chain) await localChain.stop();
    },
  };
}

export {
  type AuthorizationFields,
  authorizationJson,
  freshAuthorization,
  fromBase64Json,
  nowSeconds,
  randomNonce,
  signAuthorization,
  signCancellation,
  toBase64Json,
  v1Header,
  v2Header,
} from './x402-auth.ts';
