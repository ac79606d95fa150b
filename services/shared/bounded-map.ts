/**
 * Sets `key` in a memo that holds at most `limit` entries, dropping the oldest (first inserted)
 * when a new key would pass the limit. For memos keyed by what callers choose (texts, subjects),
 * where a flood of distinct keys must not grow memory; replacing a known key drops nothing.
 */
export function setBounded<K, V>(memo: Map<K, V>, key: K, value: V, limit: number): void {
  if (!memo.has(key) && memo.size >= limit) memo.delete(memo.keys().next().value!);
  memo.set(key, value);
}
