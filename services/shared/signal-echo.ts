/**
 * A supervisor stops a service by signalling its process group (systemd, Docker's init, a
 * process manager): every process of `npm start` gets the SIGTERM, and npm passes it on to its
 * child as well, so the service can receive it twice within moments. A SIGTERM that soon after
 * the first is that one signal, not an operator insisting; a later one (or a second Ctrl-C, which
 * a person means) still exits at once.
 */
export const SIGNAL_ECHO_MS = 1_000;

export function isEcho(
  first: { signal: NodeJS.Signals; at: number } | null,
  signal: NodeJS.Signals,
  now: number,
): boolean {
  return (
    first !== null && signal === 'SIGTERM' && first.signal === 'SIGTERM' && now - first.at < SIGNAL_ECHO_MS
  );
}
