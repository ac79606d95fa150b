import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { Config } from '../../contracts/config.ts';
import { newEvent, type Plan } from '../../contracts/events.ts';
import type { ChatQuotaSnapshot } from '../../contracts/knowledge.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { onLiveCounters } from '../metering/quota-meter.ts';
import { QUOTA_FAMILY } from '../metering/quota-rebuild.ts';
import { chatKey, counterExpiry, type QuotaSubject, quotaPeriod, resetsAtOf } from '../metering/windows.ts';

export type ChatLimits = Record<Plan, number>;

export function chatLimits(
  config: Pick<Config, 'CHAT_QUOTA_FREE' | 'CHAT_QUOTA_STARTER' | 'CHAT_QUOTA_PRO'>,
): ChatLimits {
  return { free: config.CHAT_QUOTA_FREE, starter: config.CHAT_QUOTA_STARTER, pro: config.CHAT_QUOTA_PRO };
}

/** The counter's key inside the quota generation (see services/metering/quota-rebuild.ts). */
export { chatKey };

export function chatStream(subject: string): string {
  return `chat-quota-${subject}`;
}

function snapshot(used: number, total: number, month: string): ChatQuotaSnapshot {
  return {
    used,
    total,
    remaining: Math.max(0, total - used),
    resets_at: new Date(resetsAtOf(month)).toISOString(),
  };
}

export type Consumed =
  | { ok: true; month: string; snapshot: ChatQuotaSnapshot }
  | { ok: false; snapshot: ChatQuotaSnapshot; retryAfterSeconds: number };

/**
 * The monthly chat budget. Check and take are one atomic cache step (the debit script on Redis,
 * a synchronous update in process), so concurrent chats can never take more than is left; each
 * take and each refund is then recorded, the facts the counters are rebuilt from. The counters
 * live in the quota's generations (QUOTA_FAMILY), so a cache that lost its data rebuilds them
 * from the log with the call counters instead of giving every chat away again.
 */
export class ChatQuota {
  constructor(
    private readonly deps: {
      cache: Cache;
      store: EventStore;
      limits: ChatLimits;
      now?: () => number;
      /** Brings the quota generation back when it is gone (the call quota's QuotaCounters.ensure). */
      ensureCounters?: () => Promise<void>;
    },
  ) {}

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /** Runs `op`; when the generation is gone, waits a little for its rebuild and tries once more. */
  private live<T>(op: () => Promise<T>): Promise<T> {
    return onLiveCounters(op, this.deps.ensureCounters);
  }

  async peek(subject: QuotaSubject): Promise<ChatQuotaSnapshot> {
    const { month } = quotaPeriod(this.now());
    const [used] = await this.live(() =>
      this.deps.cache.readLive(QUOTA_FAMILY, [chatKey(subject.id, month)]),
    );
    return snapshot(used ?? 0, this.deps.limits[subject.plan], month);
  }

  async consume(subject: QuotaSubject, model: string, requestId: string): Promise<Consumed> {
    const period = quotaPeriod(this.now());
    const total = this.deps.limits[subject.plan];
    const key = chatKey(subject.id, period.month);
    const result = await this.live(() =>
      this.deps.cache.debitLive(
        QUOTA_FAMILY,
        [{ key, limit: total, expiresAt: counterExpiry(period.monthResetsAt) }],
        1,
      ),
    );
    const after = snapshot(result.counts[0] ?? 0, total, period.month);
    if (!result.ok) {
      const retryAfterSeconds = Math.max(1, Math.ceil((period.monthResetsAt - this.now()) / 1000));
      return { ok: false, snapshot: after, retryAfterSeconds };
    }
    try {
      await this.deps.store.append(
        chatStream(subject.id),
        [
          newEvent('ChatQuotaConsumed', {
            subject: subject.id,
            subjectKind: subject.kind,
            plan: subject.plan,
            month: period.month,
            model,
            requestId,
            generation: result.generation,
          }),
          // A quota debit: answered once committed (deploy/README.md, durability by event class).
        ],
        { durability: 'committed' },
      );
    } catch (err) {
      // Unrecorded, the unit would vanish on the next rebuild: give it back now instead.
      await this.deps.cache.releaseLive(QUOTA_FAMILY, result.generation, [key], 1).catch(() => false);
      throw err;
    }
    return { ok: true, month: period.month, snapshot: after };
  }

  async refund(
    subject: QuotaSubject,
    month: string,
    requestId: string,
    reason: string,
  ): Promise<ChatQuotaSnapshot> {
    const key = chatKey(subject.id, month);
    // Given back on whichever generation is live (it holds the chat, from the log or its own
    // debit), and tagged with it so a rebuild replays the refund on any other one exactly once.
    const generation = await this.deps.cache.refundLive(QUOTA_FAMILY, [key], 1);
    await this.deps.store.append(chatStream(subject.id), [
      newEvent('ChatQuotaRefunded', {
        subject: subject.id,
        month,
        requestId,
        reason,
        ...(generation === null ? {} : { generation }),
      }),
    ]);
    const [used] =
      generation === null ? [0] : await this.deps.cache.readLive(QUOTA_FAMILY, [key]).catch(() => [0]);
    return snapshot(used ?? 0, this.deps.limits[subject.plan], month);
  }
}

/** Chat counters per month window, as the cache should hold them. */
export type ChatBalances = Record<string, number>;

export const chatQuotaProjection: Projection<ChatBalances> = defineProjection({
  name: 'chat-quota',
  version: 1,
  eventTypes: ['ChatQuotaConsumed', 'ChatQuotaRefunded'],
  initial: (): ChatBalances => ({}),
  evolve(state, event) {
    if (event.type === 'ChatQuotaConsumed') {
      const key = chatKey(event.data.subject, event.data.month);
      state[key] = (state[key] ?? 0) + 1;
    } else {
      const key = chatKey(event.data.subject, event.data.month);
      state[key] = Math.max(0, (state[key] ?? 0) - 1);
    }
    return state;
  },
});
