import type { Logger } from 'pino';
import type { Cache, QuotaWindow } from '../../../adapters/cache/port.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../../adapters/event-store/port.ts';
import { type IssuedKey, issueKey, KeyRuleError } from '../../keys/key-commands.ts';
import { anonymousSubject } from '../../metering/caller.ts';
import { counterExpiry, type QuotaPeriod, quotaPeriod } from '../../metering/windows.ts';
import { restoreNonce } from './nonces.ts';

export interface FreeKeyIssuer {
  store: EventStore;
  /** The shared cache (Redis in a fleet, in-process on the embedded box), where nonces live too. */
  cache: Cache;
  /** FREE_KEYS_PER_ADDRESS_PER_DAY. */
  perDay: number;
  logger: Logger;
}

export type FreeKeyOutcome =
  | { issued: IssuedKey }
  /** The wallet has had its free key: nothing written, nothing charged. */
  | { refused: 'exists' }
  /** The client network's budget for the UTC day is spent: nothing written, the nonce given back. */
  | { refused: 'budget'; limit: number; retryAfterSeconds: number };

/** The stream a wallet's free key is issued on: appending with "no stream" makes it one per wallet. */
export function walletStream(address: string): string {
  return `wallet-${address.toLowerCase()}`;
}

/**
 * The budget of a client network for the UTC day of `period`: one counter per network and day,
 * keyed by the network's anonymous subject (an IPv4 address, an IPv6 /64, hashed as the rate limit
 * and the quota count an anonymous caller), kept as long as the quota's day counters.
 */
export function freeKeyWindow(clientAddress: string, perDay: number, period: QuotaPeriod): QuotaWindow {
  return {
    key: `freekeys:${anonymousSubject(clientAddress).id}:d:${period.day}`,
    limit: perDay,
    expiresAt: counterExpiry(period.dayResetsAt),
  };
}

/**
 * Issues a wallet's free key: the one way POST /api/keys and the OAuth consent page's wallet
 * sign-in do it, so both draw on one budget per client network and UTC day. A wallet is a fresh
 * private key, free to make: one key per wallet alone let one network mint keys without end.
 *
 * The sign-in's nonce is already consumed (`nonce`). A wallet that has its key is refused before
 * the budget is touched. The budget's unit is taken atomically before the key's event is written
 * and given back when that write fails (another sign-in of the wallet won the stream, or an
 * error), so a refusal leaves nothing behind; over budget, the nonce is made usable again, and the
 * same signed message may be sent once the day turns (while the nonce lives).
 */
export async function issueFreeKey(
  deps: FreeKeyIssuer,
  input: { address: string; clientAddress: string; nonce: string },
): Promise<FreeKeyOutcome> {
  const stream = walletStream(input.address);
  if ((await deps.store.streamRevision(stream)) !== null) return { refused: 'exists' };
  const now = Date.now();
  const period = quotaPeriod(now);
  const window = freeKeyWindow(input.clientAddress, deps.perDay, period);
  const debit = await deps.cache.debitWindows([window], 1);
  if (!debit.ok) {
    await restoreNonce(deps.cache, input.nonce).catch((err: unknown) =>
      deps.logger.warn({ err }, 'free-key budget: a refused sign-in could not give its nonce back'),
    );
    const retryAfterSeconds = Math.max(1, Math.ceil((period.dayResetsAt - now) / 1_000));
    return { refused: 'budget', limit: window.limit, retryAfterSeconds };
  }
  try {
    return {
      issued: await issueKey(deps.store, { plan: 'free', owner: input.address, via: 'siwe', stream }),
    };
  } catch (err) {
    await deps.cache
      .releaseWindows([window.key], 1)
      .catch((released: unknown) =>
        deps.logger.warn(
          { err: released },
          'free-key budget: a sign-in that issued no key could not give its unit back (counted until UTC midnight)',
        ),
      );
    if (
      err instanceof WrongExpectedRevisionError ||
      (err instanceof KeyRuleError && err.code === 'key_exists')
    ) {
      return { refused: 'exists' };
    }
    throw err;
  }
}
