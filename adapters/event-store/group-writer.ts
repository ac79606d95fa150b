import type { AppendResult, ExpectedRevision, NewEvent } from '../../contracts/envelope.ts';

/** One append waiting for its group's round trip. */
export interface PendingAppend {
  stream: string;
  expected: ExpectedRevision;
  ids: string[];
  events: NewEvent[];
  /** On disk before the answer (else committed, flushed after). */
  flushed: boolean;
  resolve(result: AppendResult): void;
  reject(error: unknown): void;
}

export interface GroupWriterOptions {
  /** Round trips in flight at once. */
  maxInFlight: number;
  /** Appends and events one round trip carries at most. */
  maxAppends?: number;
  maxEvents?: number;
}

/**
 * Gathers the appends of one process into groups: while `maxInFlight` round trips are out, new
 * appends wait, and the next free slot takes all of them (up to the bounds) in one statement and
 * one commit. Idle, an append goes out at the end of the current tick (process.nextTick: before
 * any I/O), with every other append submitted in that tick, so grouping costs no latency; under
 * load the commit (the WAL flush) is shared by every append waiting for it. Sent at once, the
 * debits of one cache reply (answered together) went out one per free slot: groups of one,
 * each a statement, a commit and a row loop of its own on the server.
 */
export class GroupWriter {
  private readonly waiting: PendingAppend[] = [];
  private inFlight = 0;
  private pumpDue = false;
  private readonly maxAppends: number;
  private readonly maxEvents: number;

  constructor(
    private readonly send: (group: PendingAppend[]) => Promise<void>,
    private readonly options: GroupWriterOptions,
  ) {
    // 64 keeps a group's per-stream lock list and its statement small.
    this.maxAppends = options.maxAppends ?? 64;
    this.maxEvents = options.maxEvents ?? 4_096;
  }

  /** Round trips sent and the appends they carried, since the start (benches read the group size). */
  readonly totals = { groups: 0, appends: 0 };

  /** Appends waiting for a round trip, and round trips out (for metrics). */
  get depth(): { waiting: number; inFlight: number } {
    return { waiting: this.waiting.length, inFlight: this.inFlight };
  }

  submit(append: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    return new Promise<AppendResult>((resolve, reject) => {
      this.waiting.push({ ...append, resolve, reject });
      if (!this.pumpDue) {
        this.pumpDue = true;
        process.nextTick(this.duePump);
      }
    });
  }

  private readonly duePump = () => {
    this.pumpDue = false;
    this.pump();
  };

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.waiting.length > 0) {
      const group = this.take();
      this.inFlight++;
      this.totals.groups++;
      this.totals.appends += group.length;
      this.send(group)
        .catch((err: unknown) => {
          for (const member of group) member.reject(err);
        })
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }

  private take(): PendingAppend[] {
    let events = 0;
    let count = 0;
    while (count < this.waiting.length && count < this.maxAppends) {
      const size = this.waiting[count]!.events.length;
      // A group always takes its first append, whatever its size.
      if (count > 0 && events + size > this.maxEvents) break;
      events += size;
      count++;
    }
    return this.waiting.splice(0, count);
  }
}
