/**
 * `work`'s outcome, or the signal's reason once it is aborted first: a stop need not wait for work
 * whose answer nothing would use (a venue listing, a market's candles, a connection being made).
 * The work goes on; what it still yields after the abort is handed to `discard` (a connection made
 * too late is closed, not left open), or dropped without one, and its failure is no unhandled
 * rejection. Without a signal, `work` itself.
 */
export function beforeAbort<T>(
  work: Promise<T>,
  signal?: AbortSignal,
  discard?: (late: T) => unknown,
): Promise<T> {
  if (signal === undefined) return work;
  const drop = () => {
    work.then(discard).catch(() => undefined);
  };
  if (signal.aborted) {
    drop();
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      reject(signal.reason);
      drop();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/**
 * Whether `work` ended before `at` (a performance.now() time): true once it did (its failure is
 * thrown), false once `at` passes first, the work left to end on its own (what it yields then is
 * dropped, as beforeAbort drops it). A stop bounds by it what a silent server never answers.
 */
export async function endedBy(work: Promise<unknown>, at: number): Promise<boolean> {
  const deadline = AbortSignal.timeout(Math.max(0, Math.ceil(at - performance.now())));
  try {
    await beforeAbort(work, deadline);
    return true;
  } catch (err) {
    if (deadline.aborted && err === deadline.reason) return false;
    throw err;
  }
}
