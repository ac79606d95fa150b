/**
 * A copy of `item` whose `key` calls `first` the first time it is read, and reads as the item's
 * each time: a test counts what a computation has taken in (a candle fed to a state, a passage
 * indexed), one item at a time, as it takes it in, and can stop it at a given one.
 */
export function onFirstRead<T extends object, K extends keyof T>(item: T, key: K, first: () => void): T {
  let read = false;
  return {
    ...item,
    get [key]() {
      if (!read) {
        read = true;
        first();
      }
      return item[key];
    },
  } as T;
}
