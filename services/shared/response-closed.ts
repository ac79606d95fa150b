import type { ServerResponse } from 'node:http';

/**
 * Runs `fn` once when `res` closes (answered, failed, or the client gone), and at once when it
 * already has: a 'close' listener added after the client went away never runs (the event has
 * passed while the handler awaited), so what it was to give back (a key's export place, a claimed
 * request id) would stay taken for the life of the process.
 */
export function onResponseClosed(res: ServerResponse, fn: () => void): void {
  if (res.closed || res.destroyed) fn();
  else res.once('close', fn);
}
