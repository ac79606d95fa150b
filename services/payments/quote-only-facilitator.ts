import type { FacilitatorClient } from '@x402/core/server';
import type { SupportedResponse } from '@x402/core/types';
import type { Rail } from './rails.ts';

/**
 * Stands in for a facilitator when none can settle (the development rail without a key): it
 * declares the exact scheme on the rails so quotes can be built, and refuses to verify or settle.
 * The payment flow answers facilitator_not_configured before verifying (once the payment's terms
 * match the quote), so these are not reached.
 */
export function createQuoteOnlyFacilitator(rails: Rail[], why: string): FacilitatorClient {
  const refuse = async (): Promise<never> => {
    throw new Error(why);
  };
  return {
    verify: refuse,
    settle: refuse,
    async getSupported(): Promise<SupportedResponse> {
      return {
        kinds: rails.map((rail) => ({ x402Version: 2, scheme: 'exact', network: rail.network })),
        extensions: [],
        signers: {},
      };
    },
  };
}
