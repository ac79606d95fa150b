import type { Network } from '@x402/core/types';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { type Config, DEVELOPMENT_RAIL } from '../../contracts/config.ts';

/**
 * A rail is one (network, asset, recipient) pair the service accepts and its facilitator can
 * settle. The first rail is the quoted default; an extra rail is advertised only when configured.
 */
export interface Rail {
  network: Network;
  asset: `0x${string}`;
  payTo: `0x${string}`;
  /** EIP-712 domain of the asset: clients sign against it, the token checks it. */
  name: string;
  version: string;
  maxTimeoutSeconds: number;
  rpcUrl: string | undefined;
}

export function railsFromConfig(config: Config): Rail[] {
  if (!config.X402_PAY_TO) return [];
  const payTo = config.X402_PAY_TO as `0x${string}`;
  const rails: Rail[] = [
    {
      network: config.X402_NETWORK as Network,
      asset: config.X402_ASSET as `0x${string}`,
      payTo,
      name: config.X402_ASSET_NAME,
      version: config.X402_ASSET_VERSION,
      maxTimeoutSeconds: config.X402_MAX_TIMEOUT_SECONDS,
      rpcUrl: config.X402_RPC_URL,
    },
  ];
  if (config.X402_EXTRA_NETWORK && config.X402_EXTRA_ASSET) {
    rails.push({
      network: config.X402_EXTRA_NETWORK as Network,
      asset: config.X402_EXTRA_ASSET as `0x${string}`,
      payTo: (config.X402_EXTRA_PAY_TO ?? payTo) as `0x${string}`,
      name: config.X402_EXTRA_ASSET_NAME,
      version: config.X402_EXTRA_ASSET_VERSION,
      maxTimeoutSeconds: config.X402_MAX_TIMEOUT_SECONDS,
      rpcUrl: config.X402_EXTRA_RPC_URL,
    });
  }
  return rails;
}

/**
 * Which rails are quoted: the configured ones when X402_PAY_TO is set; outside production without
 * it, the two development rails (test USDC to a public test address); in production without it,
 * none.
 */
export type RailPlan =
  | { kind: 'configured'; rails: Rail[] }
  | { kind: 'development'; rails: Rail[] }
  | { kind: 'off'; reason: string };

export function railPlan(config: Config): RailPlan {
  const configured = railsFromConfig(config);
  if (configured.length > 0) return { kind: 'configured', rails: configured };
  if (config.NODE_ENV === 'production') {
    return { kind: 'off', reason: 'X402_PAY_TO is not set (required in production)' };
  }
  return {
    kind: 'development',
    rails: [
      {
        network: DEVELOPMENT_RAIL.network,
        asset: DEVELOPMENT_RAIL.asset,
        payTo: DEVELOPMENT_RAIL.payTo,
        name: DEVELOPMENT_RAIL.name,
        version: DEVELOPMENT_RAIL.version,
        maxTimeoutSeconds: config.X402_MAX_TIMEOUT_SECONDS,
        rpcUrl: DEVELOPMENT_RAIL.rpcUrl,
      },
      { ...DEVELOPMENT_SECOND_RAIL, maxTimeoutSeconds: config.X402_MAX_TIMEOUT_SECONDS },
    ],
  };
}

/**
 * The second rail quoted outside production without X402_PAY_TO, so a newcomer sees the
 * contract's extra rail: Circle's test USDC on Ethereum Sepolia, to the same public test
 * address. Settleable by the local facilitator like the first (set X402_FACILITATOR_PRIVATE_KEY
 * to a wallet with Sepolia ETH).
 */
export const DEVELOPMENT_SECOND_RAIL = {
  network: 'eip155:11155111',
  asset: '0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238',
  name: 'USDC',
  version: '2',
  payTo: DEVELOPMENT_RAIL.payTo,
  rpcUrl: 'https://ethereum-sepolia-rpc.publicnode.com',
} as const;

/** X402_EXTRA_* settings that have no effect under this plan (the start-up log warns about them). */
export function ignoredExtraSettings(config: Config, plan: RailPlan): string[] {
  const set: string[] = [];
  if (config.X402_EXTRA_NETWORK) set.push('X402_EXTRA_NETWORK');
  if (config.X402_EXTRA_ASSET) set.push('X402_EXTRA_ASSET');
  if (config.X402_EXTRA_PAY_TO) set.push('X402_EXTRA_PAY_TO');
  if (config.X402_EXTRA_RPC_URL) set.push('X402_EXTRA_RPC_URL');
  if (config.X402_EXTRA_ASSET_NAME !== 'USDC') set.push('X402_EXTRA_ASSET_NAME');
  if (config.X402_EXTRA_ASSET_VERSION !== '2') set.push('X402_EXTRA_ASSET_VERSION');
  if (set.length === 0) return [];
  // Configured with an extra rail: every setting is read.
  if (plan.kind === 'configured' && config.X402_EXTRA_NETWORK && config.X402_EXTRA_ASSET) return [];
  return set;
}

export function chainIdOf(network: string): number {
  const match = /^eip155:(\d+)$/.exec(network);
  if (!match) throw new Error(`not an EVM CAIP-2 network: ${network}`);
  return Number(match[1]);
}

const V1_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(EVM_NETWORK_CHAIN_ID_MAP).map(([name, id]) => [id, name]),
);

/** The v1 network name ("base") of a CAIP-2 network, or null when v1 has no name for it. */
export function v1NetworkName(network: string): string | null {
  return V1_NAMES[chainIdOf(network)] ?? null;
}
