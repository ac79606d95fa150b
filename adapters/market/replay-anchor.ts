import type { EventData } from '../../contracts/events.ts';
import { newEvent } from '../../contracts/events.ts';
import { type EventStore, WrongExpectedRevisionError } from '../event-store/port.ts';

export type ReplayAnchor = EventData<'ReplayClockAnchored'>;

export const REPLAY_CLOCK_STREAM = 'replay-clock';

/**
 * The deployment's replay clock, kept in the event log: the first process to open the replay
 * records its proposal; every later process (and every restart) adopts what is on record.
 * Two processes racing to record it agree through the stream's expected revision.
 */
export async function anchorInLog(
  store: EventStore,
  proposal: ReplayAnchor,
  stream = REPLAY_CLOCK_STREAM,
): Promise<ReplayAnchor> {
  const read = () => recordedAnchor(store, stream);
  const existing = await read();
  if (existing) return existing;
  try {
    await store.append(stream, [newEvent('ReplayClockAnchored', proposal)], {
      expectedRevision: 'no_stream',
    });
    return proposal;
  } catch (err) {
    if (!(err instanceof WrongExpectedRevisionError)) throw err;
    const won = await read();
    if (!won) throw err;
    return won;
  }
}

/** The replay clock the log records (what anchorInLog adopts), without recording one: undefined when none is. */
export async function recordedAnchor(
  store: EventStore,
  stream = REPLAY_CLOCK_STREAM,
): Promise<ReplayAnchor | undefined> {
  const [first] = await store.readStream(stream, { maxCount: 1 });
  return first === undefined ? undefined : (first.data as ReplayAnchor);
}
