import { createHook } from 'node:async_hooks';

/**
 * Keeps one of Node's `process.nextTick` records alive for the life of the process, so that the
 * hidden-class chain V8 builds for them is never dropped.
 *
 * Node (20 and 24) makes each tick record with an object literal whose first keys are computed
 * (symbols), so V8 reaches its hidden class through transitions, and a transition lives only
 * while some object of that class does. With no record held, V8's map log showed this chain built
 * again several times in a service's first 25 s (dropped by full collections while no tick was
 * pending), and in some processes `nextTick`, once optimised, called the runtime for each computed
 * key of the literal from then on (under perf: `Runtime_DefineKeyedOwnPropertyInLiteral` with map
 * migrations, 8.5 % of the service's CPU on GET /healthz). Timed inside the running service: 310 ns
 * per tick on Node 20 and 390-415 ns on Node 24, against 58 and 71 ns in a bare process; with a
 * record held, 72-113 and 80-105 ns (64-67 on Node 24 once promises went untracked, below). The
 * likeliest reading: the rebuilt chain is deprecated when a tick id first comes as a double, and
 * code optimised against a deprecated class cannot inline the literal and is never re-optimised.
 * Whatever the exact path, a held record keeps the chain alive.
 */
let held: object | null = null;

export function keepTickShape(): void {
  if (held !== null) return;
  // Promises untracked: enabling V8's promise hooks even for a moment turns off, for the rest of
  // the process, its inlining of promise and async-function code (a one-way protector; a million
  // awaited async calls in a loop 54 -> 71 ms after it).
  const hook = createHook({
    trackPromises: false,
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
