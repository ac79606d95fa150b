import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const MODULE = fileURLToPath(new URL('./tick-shape.ts', import.meta.url));

/**
 * Runs in a node of its own, started with V8's intrinsics and `gc` (the class of an object is not
 * visible from JavaScript otherwise), so no flag is switched inside the test worker. The module's
 * record is reached only through `heldTick()` and a WeakRef: the check holds no strong reference
 * of its own across the collections, so it fails if the module stops keeping the record.
 */
const CHECK = `
import { createHook } from 'node:async_hooks';
import { heldTick, keepTickShape } from ${JSON.stringify(MODULE)};

function nextTickRecord() {
  let record;
  const hook = createHook({
    trackPromises: false,
    init(_asyncId, type, _triggerId, resource) {
      if (type === 'TickObject') record ??= resource;
    },
  });
  hook.enable();
  process.nextTick(() => undefined);
  hook.disable();
  return record;
}
const sameClass = (a, b) => %HaveSameMap(a, b);

const before = heldTick();
keepTickShape();
const first = heldTick();
keepTickShape();
const again = heldTick();
const kept = new WeakRef(first);
const result = { before, captured: first !== null, once: first === again };
// A WeakRef keeps its target alive until the current job ends: collect in a later one.
setImmediate(() => {
  globalThis.gc();
  globalThis.gc();
  const fresh = nextTickRecord();
  result.alive = kept.deref() !== undefined;
  result.sameClass = fresh !== undefined && heldTick() !== null && sameClass(heldTick(), fresh);
  result.otherShape = sameClass(fresh, { callback: null, args: undefined });
  process.stdout.write(JSON.stringify(result));
});
`;

describe('keepTickShape', () => {
  it('keeps one tick record alive through full collections, of the class later ticks get', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--allow-natives-syntax', '--expose-gc', '--import', 'tsx', '--input-type=module', '-e', CHECK],
      { timeout: 30_000 },
    );
    expect(JSON.parse(stdout)).toEqual({
      before: null,
      captured: true,
      once: true,
      alive: true,
      sameClass: true,
      otherShape: false, // the check tells classes apart
    });
  });
});
