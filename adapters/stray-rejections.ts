import type { Logger } from 'pino';

/**
 * One process-wide guard for known stray rejections: a promise a library started and never
 * awaited, whose rejection nobody can catch, and over which Node would end the process. Each
 * kind is registered by the code that uses that library, with a recogniser as narrow as its
 * error allows (lmdb-js's second "Commit failed" from the LMDB adapter; @x402/evm's abandoned
 * asset check from the local facilitator). Any other unhandled rejection still ends the process,
 * as by default, unless another listener has taken charge of them.
 */

interface Kind {
  recognise: (reason: unknown) => boolean;
  logger: Logger | undefined;
  warnedAt: number;
}

/** An ignored stray is logged at warn once per kind per this, at debug otherwise. */
const WARN_EVERY_MS = 60_000;

const kinds = new Map<string, Kind>();
let installed = false;

/**
 * Ignores, process-wide, the unhandled rejections `recognise` accepts, logging them as `kind`
 * on `logger` (silently without one: a CLI or a test child). Registering a kind again keeps the first
 * recogniser and only adds a logger it lacked.
 */
export function ignoreStrayRejections(
  kind: string,
  recognise: (reason: unknown) => boolean,
  logger?: Logger,
): void {
  const known = kinds.get(kind);
  if (known) {
    known.logger ??= logger;
  } else {
    kinds.set(kind, { recognise, logger, warnedAt: Number.NEGATIVE_INFINITY });
  }
  if (installed) return;
  installed = true;
  process.on('unhandledRejection', onUnhandledRejection);
}

function onUnhandledRejection(reason: unknown): void {
  for (const [name, kind] of kinds) {
    if (!kind.recognise(reason)) continue;
    const message = `ignored a stray rejection (${name}): a library's promise it never awaited`;
    const now = Date.now();
    if (now - kind.warnedAt >= WARN_EVERY_MS) {
      kind.warnedAt = now;
      kind.logger?.warn({ err: reason, kind: name }, message);
    } else {
      kind.logger?.debug({ err: reason, kind: name }, message);
    }
    return;
  }
  if (process.listenerCount('unhandledRejection') === 1) throw reason;
}
