import type { Check } from '../shared/readiness.ts';
import type { ChainReader } from './chain-reader.ts';
import { withDeadline } from './local-facilitator.ts';

/**
 * How long one /readyz read of a chain's head may take (the probe gives a check 2 s) before the
 * last head seen stands in for it.
 */
const HEAD_READ_MS = 1_500;

interface NetworkHead {
  network: string;
  ok: boolean;
  /** The newest block seen and how old it is (ms), once one was read. */
  block?: number;
  ageMs?: number;
  /** Why this read of the head failed (the last head seen is judged instead). */
  error?: string;
}

function describe(head: NetworkHead, stallMs: number): string {
  if (head.ageMs === undefined) return `${head.network}: its latest block could not be read (${head.error})`;
  return (
    `${head.network}: no new block for ${Math.round(head.ageMs / 1000)} s (block ${head.block}, ` +
    `X402_CHAIN_STALL_MS ${stallMs})${head.error ? `, and it could not be read (${head.error})` : ''}; ` +
    'settlements cannot land'
  );
}

/**
 * Whether the chains the payments settle on are still moving, as /readyz reports it (`chain`).
 * Each network's latest block is read at every probe; the check fails once the newest block seen
 * is older than `stallMs` (X402_CHAIN_STALL_MS): an RPC that answers for a chain that stopped (a
 * halted sequencer, a node stuck behind) leaves every settlement unmined, each paid call served
 * pending on a payment that cannot land. The age is the block's own timestamp against this
 * host's clock, so a chain frozen before the process started is seen at the first probe. A read
 * that fails or is slow judges the last head seen, so one refused request does not flip
 * readiness, and an RPC that stays unreadable fails once that head is older than `stallMs`; a
 * chain never read is not ready.
 */
export function chainReadiness(
  chains: Map<string, ChainReader>,
  stallMs: number,
  now: () => number = Date.now,
): Check {
  const seen = new Map<string, { number: bigint; timestamp: bigint }>();
  return async () => {
    const networks = await Promise.all(
      [...chains].map(async ([network, chain]): Promise<NetworkHead> => {
        let error: string | undefined;
        try {
          const head = await withDeadline(chain.head(), HEAD_READ_MS, 'the chain did not answer its head');
          const last = seen.get(network);
          // A node behind a load balancer may answer from an older block: the newest seen counts.
          if (!last || head.number >= last.number) seen.set(network, head);
        } catch (err) {
          error = (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 200);
        }
        const head = seen.get(network);
        if (!head) return { network, ok: false, error: error ?? 'no answer' };
        const ageMs = Math.max(0, now() - Number(head.timestamp) * 1000);
        return {
          network,
          ok: ageMs <= stallMs,
          block: Number(head.number),
          ageMs,
          ...(error === undefined ? {} : { error }),
        };
      }),
    );
    const stalled = networks.filter((head) => !head.ok);
    if (stalled.length === 0) return { ok: true, networks };
    return { ok: false, detail: stalled.map((head) => describe(head, stallMs)).join('; '), networks };
  };
}
