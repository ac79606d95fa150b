import { z } from 'zod';

/**
 * The envelope every stored event carries, whatever the store. Positions are global, strictly
 * increasing and start at 1; a checkpoint of 0 means "nothing processed yet". Revisions are
 * per stream and start at 0 (the KurrentDB convention).
 */
export const StreamName = z
  .string()
  .min(1)
  .max(512)
  .regex(/^[^\s$][^\s]*$/, 'stream names have no whitespace and do not start with $');

export const RecordedEventSchema = z.object({
  id: z.uuid(),
  type: z.string().min(1).max(128),
  stream: StreamName,
  revision: z.number().int().nonnegative(),
  position: z.number().int().positive(),
  recordedAt: z.iso.datetime(),
  correlationId: z.string().min(1),
  causationId: z.string().min(1).nullable(),
  data: z.unknown(),
});
export type RecordedEvent<D = unknown, T extends string = string> = Omit<
  z.infer<typeof RecordedEventSchema>,
  'data' | 'type'
> & { type: T; data: D };

export const NewEventSchema = z.object({
  /** Supply a deterministic id to make re-appends idempotent; otherwise the store picks a fresh time-ordered one (newEventId). */
  id: z.uuid().optional(),
  type: z.string().min(1).max(128),
  data: z.unknown(),
  correlationId: z.string().min(1).optional(),
  causationId: z.string().min(1).nullable().optional(),
});
export type NewEvent<D = unknown, T extends string = string> = Omit<
  z.infer<typeof NewEventSchema>,
  'data' | 'type'
> & {
  type: T;
  data: D;
};

/** Expected revision of the target stream at append time (optimistic concurrency). */
export type ExpectedRevision = 'any' | 'no_stream' | 'stream_exists' | number;

export interface AppendResult {
  /** Revision of the last event now in the stream. */
  nextRevision: number;
  /** Global position of the last appended event. */
  position: number;
  /**
   * Whether this append wrote its events: false when it wrote nothing (an idempotent repeat of an
   * earlier append, answered with that one's revision and position, or no events). Absent when
   * the store cannot tell a repeat from a write (PostgreSQL answers both alike): a caller that
   * must know reads the log.
   */
  written?: boolean;
}
