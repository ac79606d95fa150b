import type { FacilitatorClient } from '@x402/core/server';
import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import type { Config } from '../../../contracts/config.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import { chainReadersFor } from '../../payments/chain-reader.ts';
import { PaymentLedger } from '../../payments/ledger.ts';
import { createLocalFacilitator } from '../../payments/local-facilitator.ts';
import { createQuoteOnlyFacilitator } from '../../payments/quote-only-facilitator.ts';
import { type Rail, railPlan } from '../../payments/rails.ts';
import { PaymentReconciler } from '../../payments/reconcile.ts';
import { createRemoteFacilitator } from '../../payments/remote-facilitator.ts';
import { createResourceServer } from '../../payments/resource-server.ts';
import type { PaymentRequirementsFor, PayPerCall } from '../mcp/tool-call.ts';
import { mcpPayments } from './mcp-payments.ts';
import { type KeyedAccess, x402Plugin } from './plugin.ts';
import { Quoter } from './quote.ts';
import { paidTools } from './tools.ts';

export interface X402Setup {
  /** The /x402/* routes; a key presented there is served from the keyed channel's plan quota. */
  plugin(keyed: KeyedAccess): FastifyPluginAsync;
  /** Pay-per-call over MCP, for the keyed channel: requirements when quota runs out, and paid calls. */
  mcp: { paymentRequirements: PaymentRequirementsFor; payPerCall: PayPerCall };
  /** `development`: the test rail quoted by default outside production. */
  rail: 'configured' | 'development';
  rails: Rail[];
  /** Whether a payment can be settled here (false: quotes only, paid retries get 503). */
  settles: boolean;
  reconciler: PaymentReconciler;
  facilitator: FacilitatorClient;
  /** Starts periodic reconciliation (a first round runs at once, finishing what a restart left open). */
  start(): void;
  stop(): Promise<void>;
}

const NOT_CONFIGURED =
  'pay-per-call is quoting the development rail but cannot settle: set X402_FACILITATOR_PRIVATE_KEY ' +
  '(a wallet with Base Sepolia ETH for gas) or X402_FACILITATOR=remote; nothing was reserved or charged';

function facilitatorFor(config: Config, rails: Rail[]): { facilitator: FacilitatorClient; settles: boolean } {
  if (config.X402_FACILITATOR === 'remote') {
    return {
      settles: true,
      facilitator: createRemoteFacilitator({
        url: config.X402_FACILITATOR_URL!,
        timeoutMs: config.X402_FACILITATOR_TIMEOUT_MS,
        ...(config.X402_FACILITATOR_AUTH_HEADERS ? { headers: config.X402_FACILITATOR_AUTH_HEADERS } : {}),
      }),
    };
  }
  // Only the development rail gets here without a key: configuration requires one with X402_PAY_TO.
  if (!config.X402_FACILITATOR_PRIVATE_KEY) {
    return { settles: false, facilitator: createQuoteOnlyFacilitator(rails, NOT_CONFIGURED) };
  }
  return {
    settles: true,
    facilitator: createLocalFacilitator({
      privateKey: config.X402_FACILITATOR_PRIVATE_KEY as `0x${string}`,
      networks: rails.map((rail) => {
        if (!rail.rpcUrl) throw new Error(`no RPC URL for ${rail.network}: set X402_EXTRA_RPC_URL`);
        return { network: rail.network, rpcUrl: rail.rpcUrl };
      }),
      confirmationTimeoutMs: config.X402_SETTLE_CONFIRM_TIMEOUT_MS,
    }),
  };
}

/**
 * Wires pay-per-call from configuration: the rails (configured, or the development rail outside
 * production), the facilitator (in-process, remote, or none: quotes only), the resource server,
 * the HTTP routes, the MCP transport and the reconciler. Returns null when no rail can be quoted
 * (production without X402_PAY_TO).
 */
export async function setupX402(
  config: Config,
  deps: { ops: SignalOperations; store: EventStore; logger: Logger },
): Promise<X402Setup | null> {
  const plan = railPlan(config);
  if (plan.kind === 'off') {
    deps.logger.warn(`pay-per-call routes are off: ${plan.reason}; set X402_PAY_TO to serve /x402/*`);
    return null;
  }
  const { rails } = plan;
  const { facilitator, settles } = facilitatorFor(config, rails);
  const server = await createResourceServer(facilitator, rails);
  const reconciler = new PaymentReconciler({
    store: deps.store,
    chains: chainReadersFor(rails),
    olderThanMs: config.X402_RECONCILE_AFTER_MS,
    logger: deps.logger,
  });
  const quoter = new Quoter(server, rails);
  const tools = paidTools(config);
  const flow = {
    server,
    ledger: new PaymentLedger(deps.store),
    logger: deps.logger,
    cannotSettle: settles ? null : NOT_CONFIGURED,
  };
  const quoted = rails.map(({ network, asset, payTo }) => ({ network, asset, payTo }));
  if (plan.kind === 'development') {
    deps.logger.warn(
      { rail: 'development', rails: quoted, settles },
      'pay-per-call quotes the DEVELOPMENT rail (Base Sepolia test USDC to a public test address); set X402_PAY_TO to be paid',
    );
  } else {
    deps.logger.info(
      { rail: 'configured', rails: quoted, settles },
      'pay-per-call quotes the configured rails',
    );
  }
  return {
    plugin: (keyed) =>
      x402Plugin({ ops: deps.ops, tools, quoter, flow, keyed, bodyLimit: config.X402_BODY_LIMIT_BYTES }),
    mcp: mcpPayments({ tools, quoter, flow, logger: deps.logger }),
    rail: plan.kind,
    rails,
    settles,
    reconciler,
    facilitator,
    start: () => reconciler.start(config.X402_RECONCILE_INTERVAL_MS),
    stop: () => reconciler.stop(),
  };
}
