import type { Projection } from '../../projections/projection.ts';
import type { Slice } from '../component.ts';
import type { KeyedAccess } from '../metering/caller.ts';
import { openPaymentsProjection } from './reconcile.ts';
import type { X402Setup } from './setup.ts';

/**
 * The pay-per-call slice in the module shape (api role): the /x402/* routes, the reconciler that
 * finishes settlements a restart left open, and the open-payments projection it folds. A key
 * presented on /x402/* is served from the channel's plan quota, so the routes take the channel
 * when they are registered, after it is built.
 */
export function paymentsSlice(deps: { setup: X402Setup; channel: () => KeyedAccess }): Slice {
  const { setup } = deps;
  return {
    name: 'payments',
    roles: ['api'],
    plugin: async (app, options) => setup.plugin(deps.channel())(app, options),
    projections: [openPaymentsProjection as Projection<unknown>],
    processors: [{ name: 'payment-reconciler' }],
    // Periodic reconciliation; its first round runs at once, in the background.
    async start() {
      setup.start();
    },
    stop: () => setup.stop(),
    // Whether the chain the payments settle on still moves (X402_CHAIN_STALL_MS).
    checks: () => setup.checks,
  };
}
