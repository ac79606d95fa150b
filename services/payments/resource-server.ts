import { type FacilitatorClient, x402ResourceServer } from '@x402/core/server';
import { ExactEvmScheme } from '@x402/evm/exact/server';
import { beforeAbort } from '../../adapters/before-abort.ts';
import type { Rail } from './rails.ts';

/**
 * The official transport-agnostic resource server with the exact EVM scheme on every rail's
 * network. `initialize()` asks the facilitator which kinds it supports, so a rail the
 * facilitator cannot settle fails here, at start, rather than at the first payment.
 */
export async function createResourceServer(
  facilitator: FacilitatorClient,
  rails: Rail[],
  signal?: AbortSignal,
): Promise<x402ResourceServer> {
  const server = new x402ResourceServer(facilitator);
  for (const rail of rails) {
    if (!server.hasRegisteredScheme(rail.network, 'exact'))
      server.register(rail.network, new ExactEvmScheme());
  }
  // The facilitator's `/supported` (a remote one's answer may take X402_FACILITATOR_TIMEOUT_MS):
  // a stop asked for while the process starts does not wait for it.
  await beforeAbort(server.initialize(), signal);
  for (const rail of rails) {
    if (!server.getSupportedKind(2, rail.network, 'exact')) {
      throw new Error(`the facilitator cannot settle exact payments on ${rail.network}`);
    }
  }
  return server;
}
