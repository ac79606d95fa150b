import { x402Facilitator } from '@x402/core/facilitator';
import type { FacilitatorClient } from '@x402/core/server';
import type { Network, SupportedResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { createWalletClient, defineChain, type Hex, http, nonceManager, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { chainIdOf } from './rails.ts';

export interface LocalFacilitatorOptions {
  /** Key of the wallet that submits `transferWithAuthorization` and pays its gas. */
  privateKey: Hex;
  /** One JSON-RPC endpoint per CAIP-2 network the facilitator settles on. */
  networks: { network: Network; rpcUrl: string }[];
  /** Receipt wait before a broadcast settlement is reported as `settlement_pending`. */
  confirmationTimeoutMs: number;
}

export interface LocalFacilitator extends FacilitatorClient {
  readonly kind: 'local';
  /** The official facilitator underneath, for its lifecycle hooks. */
  readonly facilitator: x402Facilitator;
  readonly signerAddress: Hex;
}

/**
 * The embedded facilitator: `@x402/core`'s x402Facilitator with the exact EVM scheme from
 * `@x402/evm`, signing with a viem wallet. It verifies (signature, recipient, amount, time
 * window, asset contract, simulated transfer) and settles on the configured chains.
 */
export function createLocalFacilitator(options: LocalFacilitatorOptions): LocalFacilitator {
  // Concurrent settlements from one wallet need locally sequenced nonces.
  const account = privateKeyToAccount(options.privateKey, { nonceManager });
  const facilitator = new x402Facilitator();
  for (const { network, rpcUrl } of options.networks) {
    const id = chainIdOf(network);
    const chain = defineChain({
      id,
      name: network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [rpcUrl] } },
    });
    const client = createWalletClient({ account, chain, transport: http(rpcUrl) }).extend(publicActions);
    const signer = toFacilitatorEvmSigner(
      {
        address: account.address,
        readContract: (args) => client.readContract(args as Parameters<typeof client.readContract>[0]),
        verifyTypedData: (args) =>
          client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0]),
        writeContract: (args) =>
          client.writeContract({ ...(args as Parameters<typeof client.writeContract>[0]), chain, account }),
        sendTransaction: (args) => client.sendTransaction({ ...args, chain, account }),
        waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
        getCode: (args) => client.getCode(args),
      },
      { confirmationTimeoutMs: options.confirmationTimeoutMs },
    );
    facilitator.register(network, new ExactEvmScheme(signer));
  }
  return {
    kind: 'local',
    facilitator,
    signerAddress: account.address,
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    async getSupported() {
      return facilitator.getSupported() as SupportedResponse;
    },
  };
}
