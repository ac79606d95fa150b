import { pino } from 'pino';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { MarketFeed } from '../adapters/market/port.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import type { Config } from '../contracts/config.ts';
import { historySlice } from '../services/history/slice.ts';

/**
 * The history slice as a harness that sells the tools needs it: the track record the api role
 * sells beside the engine's operations (get_track_record, and the line on each trade call),
 * folded from the harness's log. Started in the dispatcher's role, which folds the track record
 * and serves no export: the harnesses register the channels' routes themselves.
 */
export async function trackRecordSlice(
  config: Config,
  store: EventStore,
  projectionStore: ProjectionStore,
  feed: MarketFeed,
) {
  const slice = historySlice({
    config,
    adapters: { eventStore: store, projectionStore },
    logger: pino({ level: 'silent' }),
    roles: ['dispatcher'],
    feed,
  });
  await slice.start();
  return slice;
}
