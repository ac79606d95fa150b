import { createHook } from 'node:async_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { heldTick, keepTickShape } from './tick-shape.ts';

/** The record Node makes for one `process.nextTick`. */
function nextTickRecord(): object {
  let record: object | undefined;
  const hook = createHook({
    init(_asyncId, type, _triggerId, resource) {
      if (type === 'TickObject') record ??= resource;
    },
  });
  hook.enable();
  process.nextTick(() => undefined);
  hook.disable();
  if (record === undefined) throw new Error('no tick record seen');
  return record;
}

describe('keepTickShape', () => {
  it('holds a tick record whose hidden class later ticks still get after full collections', () => {
    keepTickShape();
    const held = heldTick();
    expect(held).not.toBeNull();
    keepTickShape();
    expect(heldTick()).toBe(held); // once per process

    // V8 intrinsics, only for the duration of this check: the class of an object is not visible
    // from JavaScript otherwise.
    setFlagsFromString('--allow-natives-syntax');
    setFlagsFromString('--expose-gc');
    let sameClass: (a: object, b: object) => boolean;
    let gc: () => void;
    try {
      sameClass = new Function('a', 'b', 'return %HaveSameMap(a, b)') as typeof sameClass;
      gc = runInNewContext('gc') as () => void;
    } finally {
      setFlagsFromString('--no-allow-natives-syntax');
      setFlagsFromString('--no-expose-gc');
    }
    gc();
    gc();
    const fresh = nextTickRecord();
    expect(sameClass(held!, fresh)).toBe(true);
    // The check can tell classes apart: an object of another shape is not of the record's class.
    expect(sameClass(held!, { callback: null, args: undefined })).toBe(false);
  });
});
