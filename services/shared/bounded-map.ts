/**
 * Sets `key` in a memo that holds at most `limit` entries, dropping the oldest (first inserted)
 * when a new key would pass the limit. For memos keyed by what callers choose (texts, subjects),
 * where a flood of distinct keys must not grow memory; replacing a known key drops nothing.
 */
export function setBounded<K, V>(memo: Map<K, V>, key: K, value: V, limit: number): void {
  if (!memo.has(key) && memo.size >= limit) memo.delete(memo.keys().next().value!);
  memo.set(key, value);
}

/**
 * `compute`, remembered by its argument in a memo of at most `limit` entries (see setBounded). What
 * it gives back is shared by every caller with that argument, so read-only.
 */
export function remembered<K, V>(compute: (key: K) => V, limit: number): (key: K) => V {
  const memo = new Map<K, V>();
  return (key) => {
    let value = memo.get(key);
    if (value === undefined) {
      value = compute(key);
      setBounded(memo, key, value, limit);
    }
    return value;
  };
}
