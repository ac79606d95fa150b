import {
  type Abi,
  type Address,
  createPublicClient,
  createTestClient,
  createWalletClient,
  type Hex,
  http,
  nonceManager,
  type PublicClient,
  type TestClient,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import { type Anvil, startAnvil } from './anvil.ts';
import { compileTestContracts } from './compile.ts';

/** Base mainnet USDC and the canonical Multicall3 address, where the facilitator looks for them. */
export const BASE_USDC: Address = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
export const MULTICALL3: Address = '0xcA11bde05977b3631167028862bE2a173976CA11';

/** anvil's first well-known development key (a public test key, funded with ETH at start). */
const MINTER_KEY: Hex = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80';
/** The facilitator's settlement wallet; the harness gives it ETH for gas. */
export const FACILITATOR_KEY: Hex = '0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba';

/** The EIP-712 types of an ERC-3009 TransferWithAuthorization, as a wallet signs them. */
export const AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export interface LocalChain {
  anvil: Anvil;
  rpcUrl: string;
  publicClient: PublicClient;
  testClient: TestClient;
  usdcAbi: Abi;
  /** Mints test USDC (atomic units) to an address. */
  mint(to: Address, amount: bigint): Promise<void>;
  balanceOf(address: Address): Promise<bigint>;
  authorizationState(authorizer: Address, nonce: Hex): Promise<boolean>;
  /** A fresh account with `amount` test USDC and no ETH (x402 payers pay no gas). */
  fundedPayer(amount: bigint): Promise<{ key: Hex; address: Address }>;
  stop(): Promise<void>;
}

/**
 * Starts anvil with the Base chain id and places our ERC-3009 test token at the Base USDC
 * address and a tryAggregate contract at the Multicall3 address.
 */
export async function startLocalChain(
  options: { blockTime?: number; host?: string } = {},
): Promise<LocalChain> {
  const [contracts, anvil] = await Promise.all([
    compileTestContracts(),
    startAnvil({
      chainId: base.id,
      ...(options.blockTime === undefined ? {} : { blockTime: options.blockTime }),
      ...(options.host === undefined ? {} : { host: options.host }),
    }),
  ]);
  try {
    const usdc = contracts.TestUsdc!;
    const multicall = contracts.TryAggregate!;
    const transport = http(anvil.rpcUrl);
    // Receipts polled often enough to see a 2 s block when it lands.
    const pollingInterval = 200;
    const publicClient = createPublicClient({ chain: base, transport, pollingInterval }) as PublicClient;
    // The tests' own chain controls (mining a thousand blocks at once, say) took over viem's 10 s
    // default on a loaded CI host; they wait as long as a test may.
    const testClient = createTestClient({
      chain: base,
      mode: 'anvil',
      transport: http(anvil.rpcUrl, { timeout: 60_000 }),
    });
    await testClient.setCode({ address: BASE_USDC, bytecode: usdc.runtime });
    await testClient.setCode({ address: MULTICALL3, bytecode: multicall.runtime });
    const facilitator = privateKeyToAccount(FACILITATOR_KEY).address;
    await testClient.setBalance({ address: facilitator, value: 10n ** 20n });
    // A fresh chain numbers every account's transactions from 0, but viem's nonceManager (the
    // facilitator's) is process-wide and keeps the last nonce it gave per address and chain id:
    // where an earlier chain of this id settled in the same process (test files sharing a worker),
    // it would hand out that chain's next nonce, and the settlement would wait forever here.
    nonceManager.reset({ address: facilitator, chainId: base.id });
    const minter = createWalletClient({ account: privateKeyToAccount(MINTER_KEY), chain: base, transport });
    const init = await minter.writeContract({
      address: BASE_USDC,
      abi: usdc.abi,
      functionName: 'initialize',
      args: [minter.account.address],
    });
    await publicClient.waitForTransactionReceipt({ hash: init });

    const balanceOf = async (address: Address) =>
      (await publicClient.readContract({
        address: BASE_USDC,
        abi: usdc.abi,
        functionName: 'balanceOf',
        args: [address],
      })) as bigint;
    const mint = async (to: Address, amount: bigint) => {
      const hash = await minter.writeContract({
        address: BASE_USDC,
        abi: usdc.abi,
        functionName: 'mint',
        args: [to, amount],
      });
      const receipt = await publicClient.waitForTransactionReceipt({ hash });
      if (receipt.status !== 'success') throw new Error('mint reverted');
    };
    return {
      anvil,
      rpcUrl: anvil.rpcUrl,
      publicClient,
      testClient,
      usdcAbi: usdc.abi,
      mint,
      balanceOf,
      async authorizationState(authorizer, nonce) {
        return (await publicClient.readContract({
          address: BASE_USDC,
          abi: usdc.abi,
          functionName: 'authorizationState',
          args: [authorizer, nonce],
        })) as boolean;
      },
      async fundedPayer(amount) {
        const key = generatePrivateKey();
        const address = privateKeyToAccount(key).address;
        await mint(address, amount);
        return { key, address };
      },
      stop: () => anvil.stop(),
    };
  } catch (err) {
    await anvil.stop();
    throw err;
  }
}

/**
 * The payer's own wallet on the chain, given ETH for gas: what a payer acting on chain by
 * themselves (landing, cancelling or spending around an authorisation) sends from.
 */
export async function payerWallet(chain: LocalChain, payer: { key: Hex; address: Address }) {
  await chain.testClient.setBalance({ address: payer.address, value: 10n ** 18n });
  return createWalletClient({
    account: privateKeyToAccount(payer.key),
    chain: base,
    transport: http(chain.rpcUrl),
  });
}
