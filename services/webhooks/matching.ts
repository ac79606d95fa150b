import { topN } from '../../contracts/webhooks.ts';
import { filtersAt, type SubscriptionRecord } from './subscription-fold.ts';

export interface Candidate {
  event: 'trade_call' | 'regime_shift' | 'risk_shift';
  coin: string;
  timeframe: string;
  exchange: string;
  /** The verdict's confidence; null for a risk shift, which `min_confidence` does not filter. */
  confidence: number | null;
  /** The event's log position: only subscriptions created before it take it. */
  position: number;
  /** The event's candle close (feed time): `top:N` ranks by the venue's ranking at it. */
  candleCloseTime: number;
}

/** The venue's markets in ranking order (0 = first); null when the ranking is unknown. */
export type RankOf = (exchange: string, coin: string) => number | null;

/** The largest top:N among a subscription's assets, or null when it lists none. */
export function largestTopN(assets: readonly string[] | undefined): number | null {
  let max: number | null = null;
  for (const asset of assets ?? []) {
    const n = topN(asset);
    if (n !== null && (max === null || n > max)) max = n;
  }
  return max;
}

/**
 * Whether an event at this log position was recorded after the subscription was created. Compared by
 * position, not by when the event is handled: a dispatcher catching up matches each event against
 * the subscriptions that existed when it was recorded.
 */
export function recordedAfter(sub: SubscriptionRecord, position: number): boolean {
  return position > sub.createdPosition;
}

/**
 * Omitted filters accept everything; given ones must all accept. The filters are those the
 * subscription had when the event was recorded (an edit applies from its log position on).
 */
export function matches(record: SubscriptionRecord, candidate: Candidate, rankOf: RankOf): boolean {
  if (record.status !== 'active') return false;
  if (!recordedAfter(record, candidate.position)) return false;
  const sub = filtersAt(record, candidate.position);
  if (!sub.events.includes(candidate.event)) return false;
  if (sub.timeframes && !sub.timeframes.includes(candidate.timeframe as never)) return false;
  if (
    sub.minConfidence !== undefined &&
    candidate.confidence !== null &&
    candidate.confidence < sub.minConfidence
  )
    return false;
  if (sub.assets && sub.assets.length > 0) {
    const coin = candidate.coin.toUpperCase();
    const listed = sub.assets.some((asset) => asset === coin);
    if (!listed) {
      const n = largestTopN(sub.assets);
      const rank = n === null ? null : rankOf(candidate.exchange, coin);
      if (n === null || rank === null || rank >= n) return false;
    }
  }
  return true;
}
