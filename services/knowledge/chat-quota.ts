import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { Config } from '../../contracts/config.ts';
import { newEvent, type Plan } from '../../contracts/events.ts';
import type { ChatQuotaSnapshot } from '../../contracts/knowledge.ts';
import { defineProjection, foldLog, type Projection } from '../../projections/projection.ts';
import type { QuotaSubject } from '../quota/quota-meter.ts';
import { counterExpiry, quotaPeriod, resetsAtOf } from '../quota/windows.ts';

export type ChatLimits = Record<Plan, number>;

export function chatLimits(
  config: Pick<Config, 'CHAT_QUOTA_FREE' | 'CHAT_QUOTA_STARTER' | 'CHAT_QUOTA_PRO'>,
): ChatLimits {
  return { free: config.CHAT_QUOTA_FREE, starter: config.CHAT_QUOTA_STARTER, pro: config.CHAT_QUOTA_PRO };
}

export function chatKey(subject: string, month: string): string {
  return `chat:${subject}:m:${month}`;
}

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
 * take and each refund is then recorded, the facts the counters are rebuilt from.
 */
export class ChatQuota {
  constructor(
    private readonly deps: { cache: Cache; store: EventStore; limits: ChatLimits; now?: () => number },
  ) {}

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  async peek(subject: QuotaSubject): Promise<ChatQuotaSnapshot> {
    const { month } = quotaPeriod(this.now());
    const [used] = await this.deps.cache.readWindows([chatKey(subject.id, month)]);
    return snapshot(used ?? 0, this.deps.limits[subject.plan], month);
  }

  async consume(subject: QuotaSubject, model: string, requestId: string): Promise<Consumed> {
    const period = quotaPeriod(this.now());
    const total = this.deps.limits[subject.plan];
    const key = chatKey(subject.id, period.month);
    const result = await this.deps.cache.debitWindows(
      [{ key, limit: total, expiresAt: counterExpiry(period.monthResetsAt) }],
      1,
    );
    const after = snapshot(result.counts[0] ?? 0, total, period.month);
    if (!result.ok) {
      const retryAfterSeconds = Math.max(1, Math.ceil((period.monthResetsAt - this.now()) / 1000));
      return { ok: false, snapshot: after, retryAfterSeconds };
    }
    try {
      await this.deps.store.append(chatStream(subject.id), [
        newEvent('ChatQuotaConsumed', {
          subject: subject.id,
          subjectKind: subject.kind,
          plan: subject.plan,
          month: period.month,
          model,
          requestId,
        }),
      ]);
    } catch (err) {
      // Unrecorded, the unit would vanish on the next rebuild: give it back now instead.
      await this.deps.cache.releaseWindows([key], 1).catch(() => undefined);
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
    const [used] = await this.deps.cache.releaseWindows([chatKey(subject.id, month)], 1);
    await this.deps.store.append(chatStream(subject.id), [
      newEvent('ChatQuotaRefunded', { subject: subject.id, month, requestId, reason }),
    ]);
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

/** Sets the cache's chat counters of still-open months from the log (the in-process cache at start). */
export async function rebuildChatQuota(deps: { store: EventStore; cache: Cache; now?: number }) {
  const now = deps.now ?? Date.now();
  const { state, events } = await foldLog(deps.store, chatQuotaProjection);
  const windows = Object.entries(state)
    .map(([key, count]) => ({
      key,
      count,
      expiresAt: counterExpiry(resetsAtOf(key.slice(key.lastIndexOf(':') + 1))),
    }))
    .filter((w) => w.expiresAt > now);
  for (let i = 0; i < windows.length; i += 500) await deps.cache.setWindows(windows.slice(i, i + 500));
  return { windows: windows.length, events };
}
