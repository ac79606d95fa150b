/** How long a long computation works before the event loop has its turn. */
export const WORK_SLICE_MS = 20;

/**
 * A long synchronous computation (the knowledge index's build, a market state's warm-up) cut into
 * slices of WORK_SLICE_MS, the event loop given its turn between them: done in one go, it holds
 * off every timer, request and signal meanwhile (a SIGTERM's shutdown timeout fired only once the
 * index was built; a stop during the engine's first round waited for every warm-up under way).
 * `signal` is checked before every step, so an abort ends the work at the step it finds it at.
 *
 *     const slices = new WorkSlices(signal);
 *     for (const item of items) {
 *       if (slices.due()) await slices.turn();
 *       step(item);
 *     }
 */
export class WorkSlices {
  private since = performance.now();

  /** Throws the signal's reason if it is already aborted: the work does not begin. */
  constructor(
    private readonly signal?: AbortSignal,
    private readonly sliceMs = WORK_SLICE_MS,
  ) {
    signal?.throwIfAborted();
  }

  /**
   * Before each step: throws the signal's reason once aborted; true once the slice is used up,
   * when the caller awaits turn() before the step.
   */
  due(): boolean {
    this.signal?.throwIfAborted();
    return performance.now() - this.since >= this.sliceMs;
  }

  /**
   * The event loop's turn, then a new slice; throws the signal's reason if it was aborted meanwhile.
   * The turns of every WorkSlices in the process are one queue (nextTurn), so several at once
   * (the first round's concurrent warm-ups) still hold the loop one slice at a time.
   */
  async turn(): Promise<void> {
    await nextTurn();
    this.signal?.throwIfAborted();
    this.since = performance.now();
  }
}

/** Slices waiting for their turn, first come first served. */
const waiting: (() => void)[] = [];

/**
 * Resolves once the event loop has been round once (timers, I/O and signals served) and the
 * slices queued before this one have had theirs: one slice resumes per pass. Each waiting on its
 * own setImmediate, every slice due in a pass resumed in the same check phase, back to back: 16
 * warm-ups of 20 ms held a SIGTERM's handler 0.3 s a pass, about a second beside 4 CPU hogs.
 */
function nextTurn(): Promise<void> {
  return new Promise((resume) => {
    waiting.push(resume);
    if (waiting.length === 1) setImmediate(resumeOne);
  });
}

/** Resumes the first waiting slice; an immediate queued here runs on the loop's next pass. */
function resumeOne(): void {
  const resume = waiting.shift();
  if (waiting.length > 0) setImmediate(resumeOne);
  resume?.();
}
