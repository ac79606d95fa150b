/**
 * A stop signal often reaches the service twice for one event: a supervisor signals the whole
 * process group (systemd, Docker's init, a process manager), a terminal's Ctrl-C signals the
 * foreground group, and in either case `npm start` passes its own copy on to its child as well.
 * The copy can come any time after the first (a loaded host delivered two SIGTERMs sent 0.3 s apart
 * 1.38 s apart), so no time window tells it apart: the first repeat of the first signal is taken as
 * that copy, and only a further signal, or another kind of signal, is someone insisting, which
 * exits at once. A second Ctrl-C thus exits at once under `npm start` (its two copies follow the
 * first two); running node alone, the third does. The stop has its own time limit either way
 * (SHUTDOWN_TIMEOUT_MS).
 */
export interface SignalsSeen {
  /** The signal that began the stop. */
  signal: NodeJS.Signals;
  /** Whether its copy has come. */
  echoed: boolean;
}

/** Whether `signal`, coming after `first`, is its copy (and records that the copy came). */
export function isEcho(first: SignalsSeen | null, signal: NodeJS.Signals): boolean {
  if (first === null || first.echoed || signal !== first.signal) return false;
  first.echoed = true;
  return true;
}
