/**
 * When a verdict's outcome counts as known, and so its content public: wall time, and never
 * ahead of the market feed's clock (a replay reveals in feed time, which starts in the past).
 * Exports, the track record and /verify judge reveal on this one clock.
 */
export function revealClock(feed: { now(): number } | null): () => number {
  return () => Math.min(Date.now(), feed ? feed.now() : Date.now());
}
