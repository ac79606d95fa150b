import type { Projection } from './projection.ts';

export interface EventStats {
  total: number;
  byType: Record<string, number>;
  lastPosition: number;
  lastRecordedAt: string | null;
}

/**
 * Counts of recorded events by type: the operator's view of what the log holds, kept in the
 * projection store; its checkpoint shows in /readyz as `projection:event-stats`.
 */
export const eventStatsProjection: Projection<EventStats> = {
  name: 'event-stats',
  version: 1,
  initial: () => ({ total: 0, byType: {}, lastPosition: 0, lastRecordedAt: null }),
  evolve(state, event) {
    state.total += 1;
    state.byType[event.type] = (state.byType[event.type] ?? 0) + 1;
    state.lastPosition = event.position;
    state.lastRecordedAt = event.recordedAt;
    return state;
  },
};
