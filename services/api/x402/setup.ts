import type { FacilitatorClient } from '@x402/core/server';
import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import type { Config } from '../../../contracts/config.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import { chainReadersFor } from '../../payments/chain-reader.ts';
import { createLocalFacilitator } from '../../payments/local-facilitator.ts';
import { railsFromConfig } from '../../payments/rails.ts';
import { PaymentReconciler } from '../../payments/reconcile.ts';
import { createRemoteFacilitator } from '../../payments/remote-facilitator.ts';
import { createResourceServer } from '../../payments/resource-server.ts';
import { x402Plugin } from './plugin.ts';

export interface X402Setup {
  plugin: FastifyPluginAsync;
  reconciler: PaymentReconciler;
  facilitator: FacilitatorClient;
  /** Starts periodic reconciliation (a first round runs at once, finishing what a restart left open). */
  start(): void;
  stop(): Promise<void>;
}

/**
 * Wires pay-per-call from configuration: the facilitator (in-process or remote), the resource
 * server, the routes and the reconciler. Returns null when no X402_PAY_TO is configured: without
 * a recipient there is nothing to quote.
 */
export async function setupX402(
  config: Config,
  deps: { ops: SignalOperations; store: EventStore; logger: Logger },
): Promise<X402Setup | null> {
  const rails = railsFromConfig(config);
  if (rails.length === 0) {
    deps.logger.warn('pay-per-call routes are off: set X402_PAY_TO to serve /x402/*');
    return null;
  }
  const facilitator: FacilitatorClient =
    config.X402_FACILITATOR === 'remote'
      ? createRemoteFacilitator({
          url: config.X402_FACILITATOR_URL!,
          timeoutMs: config.X402_FACILITATOR_TIMEOUT_MS,
          ...(config.X402_FACILITATOR_AUTH_HEADERS ? { headers: config.X402_FACILITATOR_AUTH_HEADERS } : {}),
        })
      : createLocalFacilitator({
          privateKey: config.X402_FACILITATOR_PRIVATE_KEY as `0x${string}`,
          networks: rails.map((rail) => {
            if (!rail.rpcUrl) throw new Error(`no RPC URL for ${rail.network}: set X402_EXTRA_RPC_URL`);
            return { network: rail.network, rpcUrl: rail.rpcUrl };
          }),
          confirmationTimeoutMs: config.X402_SETTLE_CONFIRM_TIMEOUT_MS,
        });
  const server = await createResourceServer(facilitator, rails);
  const reconciler = new PaymentReconciler({
    store: deps.store,
    chains: chainReadersFor(rails),
    olderThanMs: config.X402_RECONCILE_AFTER_MS,
    logger: deps.logger,
  });
  return {
    plugin: x402Plugin({
      ops: deps.ops,
      store: deps.store,
      server,
      rails,
      prices: config,
      bodyLimit: config.X402_BODY_LIMIT_BYTES,
      logger: deps.logger,
    }),
    reconciler,
    facilitator,
    start: () => reconciler.start(config.X402_RECONCILE_INTERVAL_MS),
    stop: () => reconciler.stop(),
  };
}
