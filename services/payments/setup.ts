import type { FacilitatorClient, x402ResourceServer } from '@x402/core/server';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { KeyedLock } from '../../adapters/keyed-lock.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import { type Config, publicBaseUrl } from '../../contracts/config.ts';
import { catalogTools, quoteExtensions } from '../api/discovery/catalog.ts';
import type { PaymentRequirementsFor, PayPerCall } from '../api/mcp/tool-call.ts';
import { signalToolTable } from '../api/mcp/tool-registry.ts';
import type { SignalOperations } from '../engine/operations.ts';
import type { KeyedAccess } from '../metering/caller.ts';
import { setBounded } from '../shared/bounded-map.ts';
import type { Check } from '../shared/readiness.ts';
import { chainReadersFor, REQUEST_LOOKBACK_BLOCKS } from './chain-reader.ts';
import { ChainHeads } from './chain-readiness.ts';
import { PayerExposure } from './exposure.ts';
import { x402Plugin } from './http/plugin.ts';
import { PaymentLedger } from './ledger.ts';
import { createLocalFacilitator, type LocalFacilitator, withDeadline } from './local-facilitator.ts';
import { mcpPayments } from './mcp.ts';
import { drainSettlements, type PaymentFlowDeps } from './payment-flow.ts';
import { Quoter } from './quote.ts';
import { createQuoteOnlyFacilitator } from './quote-only-facilitator.ts';
import { ignoredExtraSettings, type Rail, railPlan } from './rails.ts';
import { PaymentReconciler, type Resettle } from './reconcile.ts';
import { createRemoteFacilitator } from './remote-facilitator.ts';
import { createResourceServer } from './resource-server.ts';
import { type PaidTool, paidTools } from './tools.ts';

export interface X402Setup {
  /** The /x402/* routes; a key presented there is served from the keyed channel's plan quota. */
  plugin(keyed: KeyedAccess): FastifyPluginAsync;
  /** Pay-per-call over MCP, for the keyed channel: requirements when quota runs out, and paid calls. */
  mcp: { paymentRequirements: PaymentRequirementsFor; payPerCall: PayPerCall };
  /** `development`: the test rail quoted by default outside production. */
  rail: 'configured' | 'development';
  rails: Rail[];
  /** What is sold per call, with its prices (for discovery documents). */
  tools: PaidTool[];
  /** Whether a payment can be settled here (false: quotes only, paid retries get 503). */
  settles: boolean;
  reconciler: PaymentReconciler;
  /** Broadcasts a served payment's settlement again from its recorded authorisation (the reconciler's). */
  resettle: Resettle;
  facilitator: FacilitatorClient;
  /** Resolves once every settlement handed to the background has been recorded. */
  settled(): Promise<void>;
  /**
   * The /readyz checks of pay-per-call: `chain`, whether each settling rail's chain still makes
   * blocks (X402_CHAIN_STALL_MS), while payments can be settled here and the setting is not 0.
   * It never fails readiness: a stale chain is reported degraded (see chainHeads).
   */
  checks: Record<string, Check>;
  /** The heads of the settling rails' chains, polled in the background (null when not watched). */
  chainHeads: ChainHeads | null;
  /** Starts periodic reconciliation (a first round runs at once, finishing what a restart left open). */
  start(): void;
  stop(): Promise<void>;
}

/** Past the request's settle wait before the reconciler looks at its served, pending payment. */
const SERVED_PENDING_MARGIN_MS = 10_000;

const NOT_CONFIGURED =
  'pay-per-call is quoting the development rail but cannot settle: set X402_FACILITATOR_PRIVATE_KEY ' +
  '(a wallet with Base Sepolia ETH for gas) or X402_FACILITATOR=remote; nothing was reserved or charged';

function facilitatorFor(
  config: Config,
  rails: Rail[],
  logger: Logger,
): { facilitator: FacilitatorClient; settles: boolean } {
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
      chainBudgetMs: config.X402_FACILITATOR_TIMEOUT_MS,
      payerCodeTtlMs: config.X402_PAYER_CODE_TTL_MS,
      logger,
    }),
  };
}

/**
 * The settlement of a recorded authorisation, as its payer's payment asked for it: the quote of
 * its rail for its amount, and the v2 payload of its signature (a v1 payment is settled through
 * the same payload, see runPaidCall).
 */
function resettleOn(server: x402ResourceServer, rails: Rail[]): Resettle {
  return async (auth) => {
    const rail = rails.find(
      (r) => r.network === auth.network && r.asset.toLowerCase() === auth.asset.toLowerCase(),
    );
    if (!rail) throw new Error(`no rail quotes ${auth.asset} on ${auth.network} any more`);
    const requirement: PaymentRequirements = {
      scheme: 'exact',
      network: rail.network,
      asset: rail.asset,
      amount: auth.amount,
      payTo: auth.payTo,
      maxTimeoutSeconds: rail.maxTimeoutSeconds,
      extra: { name: rail.name, version: rail.version },
    };
    const payload: PaymentPayload = {
      x402Version: 2,
      accepted: requirement,
      resource: { url: auth.resource, description: auth.tool ?? '', mimeType: 'application/json' },
      payload: {
        signature: auth.signature,
        authorization: {
          from: auth.payer,
          to: auth.payTo,
          value: auth.amount,
          validAfter: auth.validAfter,
          validBefore: auth.validBefore,
          nonce: auth.nonce,
        },
      },
    };
    return server.settlePayment(payload, requirement);
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
  deps: {
    ops: SignalOperations;
    store: EventStore;
    logger: Logger;
    /** Where the payers' exposure is held (Redis: one sum per payer across replicas). */
    cache?: Cache;
    /** Where the reconciler's open-payments projection keeps snapshots; without it, in memory. */
    projections?: ProjectionStore;
    /** The reconciler's clock, which ages open payments; Date.now unless a test moves it on. */
    now?: () => number;
    /** A stop asked for while the process starts: the wait for the facilitator ends at once. */
    signal?: AbortSignal;
  },
): Promise<X402Setup | null> {
  const plan = railPlan(config);
  if (plan.kind === 'off') {
    deps.logger.warn(`pay-per-call routes are off: ${plan.reason}; set X402_PAY_TO to serve /x402/*`);
    return null;
  }
  const { rails } = plan;
  const ignored = ignoredExtraSettings(config, plan);
  if (ignored.length > 0) {
    deps.logger.warn(
      { ignored },
      plan.kind === 'development'
        ? `${ignored.join(', ')} set but ignored: the development rails are quoted until X402_PAY_TO is set`
        : `${ignored.join(', ')} set but ignored: an extra rail needs both X402_EXTRA_NETWORK and X402_EXTRA_ASSET`,
    );
  }
  const { facilitator, settles } = facilitatorFor(config, rails, deps.logger);
  const server = await createResourceServer(facilitator, rails, deps.signal);
  const chains = chainReadersFor(rails);
  const resettle = resettleOn(server, rails);
  const reconciler = new PaymentReconciler({
    ...(settles ? { resettle } : {}),
    store: deps.store,
    chains,
    olderThanMs: config.X402_RECONCILE_AFTER_MS,
    // A served payment's settlement the node lost is broadcast again only while its authorisation
    // is valid (maxTimeoutSeconds, 120 s by default): looked at once the request's own settle wait
    // is over, not after X402_RECONCILE_AFTER_MS (5 min), when it had always lapsed (the loss).
    servedPendingAfterMs:
      (config.X402_FACILITATOR === 'remote'
        ? config.X402_FACILITATOR_TIMEOUT_MS
        : config.X402_SETTLE_CONFIRM_TIMEOUT_MS) + SERVED_PENDING_MARGIN_MS,
    logger: deps.logger,
    snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY,
    ...(deps.projections ? { projections: deps.projections } : {}),
    ...(deps.now ? { now: deps.now } : {}),
  });
  const tools = paidTools(config);
  // Each tool's 402 carries its bazaar discovery extension and the idempotency key it accepts.
  // Its recorded answer names the origin of the quote's resource (PUBLIC_BASE_URL, else the
  // request's); an MCP quote's resource (mcp://tool/…) has none: the service's public base.
  const catalog = new Map(catalogTools(signalToolTable(), tools).map((tool) => [tool.name, tool]));
  const extensions = new Map<string, Record<string, unknown>>();
  const base = publicBaseUrl(config);
  const quoter = new Quoter(server, rails, (resource) => {
    const name = /(?:\/x402\/|^mcp:\/\/tool\/)([a-z_]+)(?:[?#]|$)/.exec(resource.url)?.[1];
    const tool = name === undefined ? undefined : catalog.get(name);
    if (!tool) return undefined;
    const origin = /^https?:/.test(resource.url) ? new URL(resource.url).origin : base;
    const key = `${tool.name} ${origin}`;
    let built = extensions.get(key);
    if (!built) {
      built = quoteExtensions(tool, origin);
      // The origin may be any Host a client names (no PUBLIC_BASE_URL): the oldest is dropped.
      setBounded(extensions, key, built, 256);
    }
    return built;
  });
  const local =
    (facilitator as Partial<LocalFacilitator>).kind === 'local' ? (facilitator as LocalFacilitator) : null;
  /** A chain read within the facilitator's budget, as the verification before it: 503 rather than a wait. */
  const chainRead = <T>(read: Promise<T>, what: string): Promise<T> =>
    withDeadline(read, config.X402_FACILITATOR_TIMEOUT_MS, `the chain did not answer ${what}`);
  const flow: PaymentFlowDeps = {
    server,
    ops: deps.ops,
    ledger: new PaymentLedger(deps.store),
    logger: deps.logger,
    cannotSettle: settles ? null : NOT_CONFIGURED,
    exposure: new PayerExposure(
      deps.cache
        ? {
            cache: deps.cache,
            // Longer than a settlement can stay open: the confirm wait, then the reconciler's turn.
            holdMs: config.X402_SETTLE_CONFIRM_TIMEOUT_MS + config.X402_RECONCILE_AFTER_MS + 60_000,
            onReleaseError: (err) =>
              deps.logger.warn({ err }, 'payer exposure release failed; freed at expiry'),
          }
        : null,
    ),
    balanceOf: (id) => {
      const chain = chains.get(id.network);
      return chain
        ? () =>
            chainRead(
              chain.balanceOf(id.asset as `0x${string}`, id.payer as `0x${string}`),
              "the payer's balance read",
            )
        : null;
    },
    chainFacts: (id) => {
      const chain = chains.get(id.network);
      if (!chain) return null;
      const asset = id.asset as `0x${string}`;
      const payer = id.payer as `0x${string}`;
      // Each unread rather than failed: a fact missing leaves the facilitator's own reason standing.
      const fact = <T>(read: Promise<T>, what: string): Promise<T | null> =>
        chainRead(read, what).catch((err: unknown) => {
          deps.logger.warn({ err, payer }, `${what} could not be read for a refusal`);
          return null;
        });
      return async () => {
        const [balance, used, chainTime] = await Promise.all([
          fact(chain.balanceOf(asset, payer), "the payer's balance"),
          fact(chain.authorizationUsed(asset, payer, id.nonce as `0x${string}`), "the authorisation's state"),
          fact(chain.chainTime(), "the chain's time"),
        ]);
        return { balance, used, chainTime };
      };
    },
    authorizationOutcome: (id) => {
      const chain = chains.get(id.network);
      return chain
        ? (agreed) =>
            chainRead(
              // Only the recent blocks: the use fell between this request's verification and settlement.
              chain.authorizationOutcome(
                {
                  asset: id.asset as `0x${string}`,
                  authorizer: id.payer as `0x${string}`,
                  nonce: id.nonce as `0x${string}`,
                  ...agreed,
                },
                REQUEST_LOOKBACK_BLOCKS,
              ),
              "the authorisation's use",
            )
        : null;
    },
    settlements: new KeyedLock(),
    submissions: local?.submissions ?? null,
    submitWaitMs: config.X402_SETTLE_CONFIRM_TIMEOUT_MS,
    holdPendingMs: config.X402_RECONCILE_AFTER_MS,
    paidResponseTtlMs: config.X402_PAID_RESPONSE_TTL_MS,
    background: new Set(),
  };
  // Whether the settling rails' chains still move: read in the background, reported, never failing.
  const chainHeads =
    settles && config.X402_CHAIN_STALL_MS > 0 ? new ChainHeads(chains, config.X402_CHAIN_STALL_MS) : null;
  const quoted = rails.map(({ network, asset, payTo }) => ({ network, asset, payTo }));
  if (plan.kind === 'development') {
    deps.logger.warn(
      { rail: 'development', rails: quoted, settles },
      'pay-per-call quotes the DEVELOPMENT rails (Base Sepolia and Ethereum Sepolia test USDC to a public test address); set X402_PAY_TO to be paid',
    );
  } else {
    deps.logger.info(
      { rail: 'configured', rails: quoted, settles },
      'pay-per-call quotes the configured rails',
    );
  }
  return {
    plugin: (keyed) =>
      x402Plugin({
        ops: deps.ops,
        tools,
        quoter,
        flow,
        keyed,
        bodyLimit: config.X402_BODY_LIMIT_BYTES,
        publicBaseUrl: config.PUBLIC_BASE_URL,
      }),
    mcp: mcpPayments({ tools, quoter, flow, logger: deps.logger }),
    rail: plan.kind,
    rails,
    tools,
    settles,
    reconciler,
    resettle,
    facilitator,
    settled: () => drainSettlements(flow),
    checks: chainHeads ? { chain: chainHeads.check } : {},
    chainHeads,
    start: () => {
      reconciler.start(config.X402_RECONCILE_INTERVAL_MS);
      chainHeads?.start();
    },
    stop: async () => {
      chainHeads?.stop();
      await drainSettlements(flow);
      await reconciler.stop();
    },
  };
}
