import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { openReplayFeed } from '../adapters/market/replay.ts';
import type { Exchange, Timeframe } from '../contracts/market.ts';
import { createSignalEngine } from '../services/engine/engine.ts';
import { HISTORY_CALIBRATION, HOUR } from './history-harness.ts';

/**
 * A spot 5m market (blocks of one UTC day) and a perp 4h one (blocks of two days): over
 * INTERVAL_DAYS the 5m line's risk record spans more than the 20 blocks an interval needs, while
 * the 4h line and the overall one (resampled in the longest timeframe's two-day blocks) hold
 * about half as many, so one history shows a line with intervals and lines without.
 */
export const INTERVAL_MARKETS: { exchange: Exchange; coin: string; timeframe: Timeframe }[] = [
  { exchange: 'BINANCE_SPOT', coin: 'SOL', timeframe: '5m' },
  { exchange: 'BINANCE', coin: 'BTC', timeframe: '4h' },
];
/** Days of verdicts: 24 one-day blocks on 5m, a margin over the 20 an interval needs. */
export const INTERVAL_DAYS = 24;
/** Hours between the verdicts asked: four a day is enough for a scored point in every block. */
const STEP_HOURS = 6;

/**
 * A real verdict history of INTERVAL_DAYS days on INTERVAL_MARKETS (the real engine over the
 * shipped replay data, from 2025-10-05, with weeks of 5m candles before and after it), one verdict
 * per market every STEP_HOURS, then the clock moved on past the 4h horizon so the outcomes fall
 * due. Only what the intervals need is recorded: about 200 verdicts.
 */
export async function recordIntervalHistory() {
  const feed = await openReplayFeed({ run: false, start: Date.parse('2025-10-05T00:00:00Z') });
  const store = new MemoryEventStore();
  const engine = await createSignalEngine({ feed, store, calibration: HISTORY_CALIBRATION });
  for (let hour = 0; hour < INTERVAL_DAYS * 24; hour += STEP_HOURS) {
    for (const m of INTERVAL_MARKETS) await engine.getTradeCall(m);
    feed.clock.advance(STEP_HOURS * HOUR);
  }
  // Six 4h candles and the hours until the last one's outcome is revealed.
  feed.clock.advance(30 * HOUR);
  return { feed, store, engine };
}
