/**
 * Runs `task` over `items` with at most `limit` running at once. After a task throws, no new
 * item is started; the call rejects with that first error once the tasks in flight have settled,
 * so nothing of it is still running when the caller handles the failure.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | null = null;
  const workers = Array.from({ length: Math.min(Math.max(1, limit), items.length) }, async () => {
    while (next < items.length && failure === null) {
      const item = items[next++]!;
      try {
        await task(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  });
  await Promise.all(workers);
  if (failure !== null) throw (failure as { error: unknown }).error;
}
