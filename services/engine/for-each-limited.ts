import pLimit from 'p-limit';

/**
 * Runs `task` over `items` with at most `limit` running at once (p-limit). After a task throws,
 * no new item is started; the call rejects with that first error once the tasks in flight have
 * settled, so nothing of it is still running when the caller handles the failure.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<void> {
  const run = pLimit(Math.max(1, limit));
  let failure: { error: unknown } | null = null;
  await Promise.all(
    items.map((item) =>
      run(async () => {
        if (failure !== null) return;
        try {
          await task(item);
        } catch (error) {
          failure ??= { error };
        }
      }),
    ),
  );
  if (failure !== null) throw (failure as { error: unknown }).error;
}
