import type { AppendResult, ExpectedRevision, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { AppendSignal, catchUpSubscription } from './catch-up.ts';
import { findIdempotentAppend, freshEventIds } from './idempotency.ts';
import { checkExpected, type EventStore, type HealthReport, recordEvent, type Subscription } from './port.ts';

/** The reference adapter: the contract in its plainest form, for unit tests. */
export class MemoryEventStore implements EventStore {
  readonly kind = 'memory' as const;
  readonly densePositions = true;
  private readonly all: RecordedEvent[] = [];
  private readonly streams = new Map<string, RecordedEvent[]>();
  private readonly byId = new Map<string, RecordedEvent>();
  private readonly signal = new AppendSignal();

  async append(
    stream: string,
    events: NewEvent[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResult> {
    const existing = this.streams.get(stream) ?? [];
    const prior = findIdempotentAppend(stream, events, (id) => this.byId.get(id));
    if (prior) return prior;
    checkExpected(
      stream,
      options.expectedRevision ?? 'any',
      existing.length === 0 ? null : existing.length - 1,
    );
    if (events.length === 0) {
      return { nextRevision: existing.length - 1, position: this.all.length, written: false };
    }
    const recordedAt = new Date().toISOString();
    const ids = freshEventIds(stream, events, (id) => this.byId.has(id));
    const recorded = events.map((event, i) =>
      recordEvent(
        { ...event, data: structuredClone(event.data) },
        { id: ids[i]!, stream, revision: existing.length + i, position: this.all.length + i + 1, recordedAt },
      ),
    );
    for (const event of recorded) {
      this.all.push(event);
      existing.push(event);
      this.byId.set(event.id, event);
    }
    this.streams.set(stream, existing);
    this.signal.notify();
    const last = recorded[recorded.length - 1]!;
    return { nextRevision: last.revision, position: last.position, written: true };
  }

  async readStream(stream: string, options: { fromRevision?: number; maxCount?: number } = {}) {
    const events = this.streams.get(stream) ?? [];
    const from = options.fromRevision ?? 0;
    return events.slice(from, from + (options.maxCount ?? Number.POSITIVE_INFINITY)).map(clone);
  }

  async readAll(options: { after?: number; maxCount?: number } = {}) {
    const after = options.after ?? 0;
    return this.all.slice(after, after + (options.maxCount ?? Number.POSITIVE_INFINITY)).map(clone);
  }

  subscribeToAll(options: { after?: number } = {}): Subscription {
    return catchUpSubscription((after, maxCount) => this.readAll({ after, maxCount }), this.signal, {
      ...options,
      pollMs: 60_000,
    });
  }

  async streamRevision(stream: string) {
    const events = this.streams.get(stream);
    return events && events.length > 0 ? events.length - 1 : null;
  }

  async headPosition() {
    return this.all.length;
  }

  async health(): Promise<HealthReport> {
    return { ok: true };
  }

  async close() {
    this.signal.notify();
  }
}

function clone(event: RecordedEvent): RecordedEvent {
  return { ...event, data: structuredClone(event.data) };
}
