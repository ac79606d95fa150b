import type { Database } from 'lmdb';

/**
 * Puts `value` under `key` in append mode (pages filled, not split in half), for databases keyed
 * by a position that only grows. LMDB refuses a key that is not past the last one by returning
 * false, which lmdb-js types as void: unchecked, the entry would be lost without a sign. Throws
 * instead, inside the caller's write transaction, so that nothing of it is committed.
 */
export function putAppend<V>(db: Database<V, number>, key: number, value: V, what: string): void {
  if ((db.putSync(key, value, { append: true }) as unknown as boolean) === false) {
    throw new Error(`${what} at ${key} is not past the last one stored`);
  }
}
