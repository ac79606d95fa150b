import { failureReason } from '../shared/failure-reason.ts';
import type { Check } from '../shared/readiness.ts';
import type { ChainReader } from './chain-reader.ts';

/** How often each rail's head is read, at most (Base makes a block every 2 s). */
export const HEAD_POLL_MS = 2_000;

/** What one rail's watcher knows, all from its own reads (never from a probe). */
interface RailHead {
  /** The highest block number seen, once one was read. */
  block?: bigint;
  /** performance.now() when that number last went up (or when watching began, before any). */
  advancedAt: number;
  /** Why the last read failed, until one succeeds: the reason its code gives, and its words. */
  error?: { reason: string; words: string };
  timer?: NodeJS.Timeout;
}

export interface ChainHeadReport {
  network: string;
  block?: number;
  /** Seconds since this process last saw the head number go up (or since it started watching). */
  ageS: number;
  stale: boolean;
  /** Why the last read failed, as its code tells (refused, timed out, HTTP 429...): never its words. */
  error?: string;
}

/**
 * Whether the chains the payments settle on still move, as this process sees them. One poller per
 * rail reads the latest block at most every `pollMs` (one read in flight, the next scheduled only
 * once it settled, on an unref'd timer), so /readyz and /metrics read cached state and probes cost
 * the RPC nothing. The age is the time since this process last saw the head number go up, on the
 * monotonic clock: neither the block's timestamp nor this host's wall clock counts, so a host clock
 * ahead does not make a live chain stale. A rail is stale once that age passes `stallMs`
 * (X402_CHAIN_STALL_MS).
 *
 * It never fails readiness: every api replica reads the same chain, so a halted sequencer or an RPC
 * outage would take all of them out of the load balancer together, and with them every call that
 * needs no chain. /readyz reports it as a degraded check (`chain`, ok: true, degraded: true) and
 * x402_chain_head_age_seconds{network} is what operators alert on.
 */
export class ChainHeads {
  private readonly heads = new Map<string, RailHead>();
  private stopped = true;

  constructor(
    private readonly chains: Map<string, ChainReader>,
    private readonly stallMs: number,
    private readonly pollMs = HEAD_POLL_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    for (const [network, chain] of this.chains) {
      const head: RailHead = { advancedAt: this.now() };
      this.heads.set(network, head);
      void this.poll(network, head, chain);
    }
  }

  stop(): void {
    this.stopped = true;
    for (const head of this.heads.values()) clearTimeout(head.timer);
  }

  private async poll(network: string, head: RailHead, chain: ChainReader): Promise<void> {
    try {
      const { number } = await chain.head();
      // A node behind a load balancer may answer from an older block: only a higher one counts.
      if (head.block === undefined || number > head.block) {
        head.block = number;
        head.advancedAt = this.now();
      }
      delete head.error;
    } catch (err) {
      // The words name the RPC's host and often its URL with a key in the path: the log's only.
      const words = (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 200);
      head.error = { reason: failureReason(err), words };
    }
    // Stopped, or stopped and started again while this read was out (the start made a new head
    // with a poller of its own): this one ends rather than poll beside it.
    if (this.stopped || this.heads.get(network) !== head) return;
    head.timer = setTimeout(() => void this.poll(network, head, chain), this.pollMs);
    head.timer.unref();
  }

  report(): ChainHeadReport[] {
    const now = this.now();
    return [...this.heads].map(([network, head]) => {
      const ageMs = Math.max(0, now - head.advancedAt);
      return {
        network,
        ...(head.block === undefined ? {} : { block: Number(head.block) }),
        ageS: Math.round(ageMs / 100) / 10,
        stale: ageMs > this.stallMs,
        ...(head.error === undefined ? {} : { error: head.error.reason }),
      };
    });
  }

  /** The last failed read's words per rail, for the log (see check). */
  private failures(): Record<string, string> {
    const words: Record<string, string> = {};
    for (const [network, head] of this.heads) if (head.error) words[network] = head.error.words;
    return words;
  }

  /** The /readyz check `chain`: never failing, degraded while a rail is stale. */
  readonly check: Check = async () => {
    const networks = this.report();
    const stale = networks.filter((n) => n.stale);
    if (stale.length === 0) return { ok: true, networks };
    const failures = this.failures();
    return {
      ok: true,
      degraded: true,
      detail: stale.map((n) => this.describe(n)).join('; '),
      networks,
      ...(Object.keys(failures).length > 0 ? { logged: failures } : {}),
    };
  };

  private describe(n: ChainHeadReport): string {
    const seen = n.block === undefined ? 'no head read yet' : `block ${n.block}`;
    return (
      `${n.network}: stale, no new block seen for ${Math.round(n.ageS)} s (${seen}, X402_CHAIN_STALL_MS ` +
      `${this.stallMs})${n.error ? `; its head could not be read (${n.error})` : ''}; settlements may not land`
    );
  }
}
