import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { hashApiKey } from './key-material.ts';
import { findByHash, type KeyRecord, type KeyRegistry } from './key-registry.ts';

/** The key could not be checked right now (registry stopped or behind, store unreachable). */
export class KeyUnverifiableError extends Error {
  override readonly name = 'KeyUnverifiableError';
}

export type KeyLookup =
  | { status: 'active'; record: KeyRecord }
  | { status: 'revoked'; record: KeyRecord }
  | { status: 'unknown' };

/**
 * Answers "who is this key" from the key-registry projection: one hash and one map lookup. A
 * key the registry does not know yet may have been issued a moment ago (by a sign-in on
 * another replica or the operator CLI), so before calling it unknown the resolver lets the
 * registry catch up to the head of the log.
 */
export class KeyResolver {
  constructor(
    private readonly deps: {
      runner: Pick<ProjectionRunner<KeyRegistry>, 'state' | 'checkpoint' | 'running' | 'error' | 'waitFor'>;
      store: Pick<EventStore, 'headPosition'>;
      catchUpTimeoutMs?: number;
    },
  ) {}

  /**
   * The lookup of a key the registry already holds, without a promise (the rate limit runs before
   * every keyed call); null when it must be resolved (`resolve`: caught up, or refused).
   */
  resolveNow(key: string): KeyLookup | null {
    const { runner } = this.deps;
    if (runner.error !== null || !runner.running) return null;
    const known = findByHash(runner.state, hashApiKey(key));
    return known ? classify(known) : null;
  }

  async resolve(key: string): Promise<KeyLookup> {
    const { runner } = this.deps;
    if (runner.error !== null || !runner.running) {
      throw new KeyUnverifiableError(
        `key registry is not running${runner.error ? `: ${runner.error.message}` : ''}`,
      );
    }
    const hash = hashApiKey(key);
    const known = findByHash(runner.state, hash);
    if (known) return classify(known);
    let head: number;
    try {
      head = await this.deps.store.headPosition();
    } catch (err) {
      throw new KeyUnverifiableError('event store unreachable', { cause: err });
    }
    if (runner.checkpoint < head) {
      try {
        await runner.waitFor(head, this.deps.catchUpTimeoutMs ?? 2_000);
      } catch (err) {
        throw new KeyUnverifiableError('key registry is behind the log', { cause: err });
      }
    }
    const caughtUp = findByHash(runner.state, hash);
    return caughtUp ? classify(caughtUp) : { status: 'unknown' };
  }
}

function classify(record: KeyRecord): KeyLookup {
  return record.revoked ? { status: 'revoked', record } : { status: 'active', record };
}
