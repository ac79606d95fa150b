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
 * it, the development rail (test USDC to a public test address); in production without it, none.
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
    ],
  };
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
