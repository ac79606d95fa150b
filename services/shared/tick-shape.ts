import { createHook } from 'node:async_hooks';

/**
 * Keeps one of Node's `process.nextTick` records alive for the life of the process, so that the
 * hidden-class chain V8 builds for them is never dropped.
 *
 * Node 20 makes each tick record with an object literal whose first keys are computed (two
 * symbols), so V8 reaches its hidden class through transitions from the empty-object map, and a
 * transition lives only while some object of that class does. In this service, with its many
 * timers and promises, a full GC can run while no tick is pending: the chain is dropped, built
 * again at the next tick, then deprecated when a tick id first arrives as a double instead of a
 * small integer. `nextTick` optimised against the deprecated class cannot inline the literal and
 * calls the runtime for each of its four keys from then on: 310 ns per tick against 58 ns in a
 * bare process, measured inside the service (8.5 % of its CPU on GET /healthz under perf). A held
 * record keeps the chain alive, in its final representation, from the start.
 */
let held: object | null = null;

export function keepTickShape(): void {
  if (held !== null) return;
  const hook = createHook({
    init(_asyncId, type, _triggerId, resource) {
      if (type === 'TickObject') held ??= resource;
    },
  });
  hook.enable();
  process.nextTick(noop);
  hook.disable();
}

/** The held tick record, or null before `keepTickShape` ran (tests). */
export function heldTick(): object | null {
  return held;
}

function noop(): void {}
