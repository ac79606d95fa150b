import type { Logger } from 'pino';
import {
  type Account,
  createPublicClient,
  createWalletClient,
  type Hex,
  hexToString,
  http,
  nonceManager,
  type PublicClient,
  stringToHex,
  type WalletClient,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { EventData } from '../../contracts/events.ts';
import { newEvent } from '../../contracts/events.ts';
import { outcomeStream } from '../../contracts/history.ts';
import { anchorLeaf, merkleRoot } from '../../contracts/verdict-hash.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import type { RunFailure } from '../shared/run-failure.ts';

/**
 * The anchor: the Merkle root of every verdict stream's heads, published on a public chain so
 * that the history cannot be rewritten, hashes and all, without the published roots giving it
 * away. The transaction goes from the anchoring wallet to itself, value 0, its data the UTF-8
 * text `history-anchor v1 <root> <position>` (root: 64 hex digits; position: the log position
 * the heads were read at), which a chain explorer shows as the transaction's input.
 */
const ANCHOR_PREFIX = 'history-anchor v1 ';
export const ANCHOR_STREAM = 'history-anchors';
const RECEIPT_TIMEOUT_MS = 120_000;

function anchorData(root: string, position: number): Hex {
  return stringToHex(`${ANCHOR_PREFIX}${root} ${position}`);
}

/** The root and position a transaction's input anchors, or null when it is no anchor. */
export function readAnchorData(input: Hex): { root: string; position: number } | null {
  let text: string;
  try {
    text = hexToString(input);
  } catch {
    return null;
  }
  const match = /^history-anchor v1 ([0-9a-f]{64}) (\d+)$/.exec(text);
  return match ? { root: match[1]!, position: Number(match[2]) } : null;
}

export interface StreamHeads {
  /** Hash of the stream's last verdict. */
  verdict: string;
  /** Hash of its last chained outcome; null before its first. */
  outcome: string | null;
}

export interface AnchorState {
  heads: Record<string, StreamHeads>;
  /** Log position of the last event that moved a head. */
  moved: number;
  last: EventData<'HistoryAnchored'> | null;
}

/** Every verdict stream's heads, and the last anchor recorded. One entry per market. */
export const anchorHeadsProjection: Projection<AnchorState> = defineProjection({
  name: 'history-anchor-heads',
  version: 1,
  eventTypes: ['VerdictRecorded', 'VerdictOutcomeResolved', 'HistoryAnchored'],
  initial: (): AnchorState => ({ heads: {}, moved: 0, last: null }),
  evolve(state, event) {
    if (event.type === 'VerdictRecorded') {
      const heads = state.heads[event.stream];
      if (heads) heads.verdict = event.data.hash;
      else state.heads[event.stream] = { verdict: event.data.hash, outcome: null };
      state.moved = event.position;
    } else if (event.type === 'VerdictOutcomeResolved') {
      const heads = state.heads[event.data.verdictStream];
      // Only the outcome the export attaches (the first of the verdict's outcome stream) is chained.
      if (heads && event.data.hash && event.stream === outcomeStream(event.data.verdictId)) {
        heads.outcome = event.data.hash;
        state.moved = event.position;
      }
    } else if (event.type === 'HistoryAnchored') {
      state.last = event.data;
    }
    return state;
  },
});

/** The root over the heads (contracts/verdict-hash.ts `merkleRoot`), and how many streams it covers. */
function headsRoot(heads: Record<string, StreamHeads>): { root: string; streams: number } {
  const leaves = Object.entries(heads).map(([stream, h]) => ({
    stream,
    leaf: anchorLeaf(stream, h.verdict, h.outcome),
  }));
  return { root: merkleRoot(leaves), streams: leaves.length };
}

/**
 * An anchor is due once `intervalMs` has passed since the last one (at once when there is none),
 * and only when a verdict or an outcome was recorded (at log position `moved`) after the last one.
 */
export function anchorDue(
  last: { anchoredAt: string; position: number } | null,
  moved: number,
  now: number,
  intervalMs: number,
): boolean {
  if (last === null) return moved > 0;
  return now - Date.parse(last.anchoredAt) >= intervalMs && moved > last.position;
}

/**
 * When to check next: when the next anchor falls due (`intervalMs` after the last one), at most
 * `checkMs` away, so that a log that starts moving after that time is seen within `checkMs`; at
 * once when it is due already and the log has moved since it (`moved`, as `anchorDue` reads it).
 * The last anchor is stamped once mined, a little after its check, and a timer may fire a little
 * before its time: a check that found the anchor a hair short of due must not wait a whole check
 * period (a fixed period of the interval sent every other interval).
 */
export function nextCheckIn(
  last: { anchoredAt: string; position: number } | null,
  moved: number,
  now: number,
  intervalMs: number,
  checkMs: number,
): number {
  if (last === null) return checkMs;
  const dueIn = Date.parse(last.anchoredAt) + intervalMs - now;
  if (dueIn > 0) return Math.min(dueIn, checkMs);
  return moved > last.position ? 0 : checkMs;
}

export interface AnchorChain {
  rpcUrl: string;
  privateKey: Hex;
}

/**
 * The processor that publishes the anchors (projections role): when the next anchor falls due,
 * and at least every `checkMs` (`nextCheckIn`), it asks whether an anchor is due; when one is, it reads the heads at the view's position, sends the transaction
 * through viem (the client the payments use, its nonces sequenced locally), waits for it to be
 * mined, and records HistoryAnchored. A failed send is logged and tried again at the next check.
 */
export class HistoryAnchorer {
  readonly name = 'history-anchor';
  readonly address: Hex;
  private readonly account: Account;
  private readonly wallet: WalletClient;
  private readonly client: PublicClient;
  private timer: NodeJS.Timeout | null = null;
  private stopped = true;
  private tick: Promise<unknown> | null = null;
  chainId: number | null = null;
  /**
   * The last check's failure while it failed (null once one anchors), whatever it threw: the
   * readiness check carries its error as its cause, so /readyz shows its reason and the log its words (the RPC's URL).
   */
  lastFailure: RunFailure | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      heads: ProjectionRunner<AnchorState>;
      chain: AnchorChain;
      intervalMs: number;
      logger: Logger;
      checkMs?: number;
      clock?: () => number;
    },
  ) {
    this.account = privateKeyToAccount(deps.chain.privateKey, { nonceManager });
    this.address = this.account.address;
    const transport = http(deps.chain.rpcUrl);
    this.wallet = createWalletClient({ account: this.account, transport });
    this.client = createPublicClient({ transport, pollingInterval: 250 }) as PublicClient;
  }

  start(): void {
    this.stopped = false;
    this.schedule(this.checkMs);
  }

  private get checkMs(): number {
    return this.deps.checkMs ?? Math.min(this.deps.intervalMs, 60_000);
  }

  /** One check `delay` ms from now; when it is done, the next is timed from the last anchor. */
  private schedule(delay: number): void {
    this.timer = setTimeout(() => {
      this.timer = null;
      let failed = false;
      this.tick = this.anchorIfDue()
        .catch((err: unknown) => {
          failed = true;
          this.lastFailure = { error: err };
          this.deps.logger.error({ err }, 'history anchor failed');
        })
        .finally(() => {
          this.tick = null;
          if (this.stopped) return;
          // A failed send is tried again a check period later, not at once against a chain that is down.
          if (failed) return this.schedule(this.checkMs);
          const { last, moved } = this.deps.heads.state;
          const now = (this.deps.clock ?? Date.now)();
          this.schedule(nextCheckIn(last, moved, now, this.deps.intervalMs, this.checkMs));
        });
    }, delay);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.tick;
  }

  /** Publishes an anchor when one is due; the recorded anchor, or null. */
  async anchorIfDue(): Promise<EventData<'HistoryAnchored'> | null> {
    const { heads, store } = this.deps;
    await heads.waitFor(await store.headPosition());
    const now = (this.deps.clock ?? Date.now)();
    if (!anchorDue(heads.state.last, heads.state.moved, now, this.deps.intervalMs)) return null;
    return this.anchor();
  }

  /** Publishes the heads as the view holds them now and records the anchor. */
  async anchor(): Promise<EventData<'HistoryAnchored'>> {
    const { heads, store } = this.deps;
    // Read together, before any await: the heads exactly at this position.
    const position = heads.checkpoint;
    const { root, streams } = headsRoot(heads.state.heads);
    this.chainId ??= await this.client.getChainId();
    const txHash = await this.wallet.sendTransaction({
      account: this.account,
      chain: null,
      to: this.address,
      value: 0n,
      data: anchorData(root, position),
    });
    // Bounded, so that a stuck chain holds up neither the next check nor a shutdown for long.
    const receipt = await this.client.waitForTransactionReceipt({
      hash: txHash,
      timeout: RECEIPT_TIMEOUT_MS,
    });
    if (receipt.status !== 'success') throw new Error(`anchor transaction ${txHash} reverted`);
    const anchored: EventData<'HistoryAnchored'> = {
      root,
      position,
      streams,
      chainId: this.chainId,
      address: this.address,
      txHash,
      blockNumber: Number(receipt.blockNumber),
      anchoredAt: new Date((this.deps.clock ?? Date.now)()).toISOString(),
    };
    const appended = await store.append(ANCHOR_STREAM, [newEvent('HistoryAnchored', anchored)]);
    await heads.waitFor(appended.position);
    this.lastFailure = null;
    this.deps.logger.info({ root, position, streams, txHash }, 'history anchored');
    return anchored;
  }
}
