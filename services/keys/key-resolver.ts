import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { setBounded } from '../shared/bounded-map.ts';
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
      runner: Pick<
        ProjectionRunner<KeyRegistry>,
        'state' | 'revision' | 'checkpoint' | 'running' | 'error' | 'waitFor'
      >;
      store: Pick<EventStore, 'headPosition'>;
      catchUpTimeoutMs?: number;
    },
  ) {}

  /**
   * Who this key is: at once, without a promise, when the running registry holds it (every keyed
   * call passes here before its route); else after letting the registry catch up to the head of
   * the log. Rejects with KeyUnverifiableError when the key cannot be checked right now.
   */
  resolve(key: string): KeyLookup | Promise<KeyLookup> {
    const { runner } = this.deps;
    if (runner.error !== null || !runner.running) {
      return Promise.reject(
        new KeyUnverifiableError(
          `key registry is not running${runner.error ? `: ${runner.error.message}` : ''}`,
        ),
      );
    }
    const revision = runner.revision;
    const remembered = this.recent.get(key);
    if (remembered !== undefined && remembered.revision === revision) return remembered.lookup;
    const hash = hashApiKey(key);
    const known = findByHash(runner.state, hash);
    if (known === undefined) return this.caughtUp(hash);
    const lookup = Object.freeze(classify(known));
    setBounded(this.recent, key, { revision, lookup }, REMEMBERED_KEYS);
    return lookup;
  }

  /**
   * Lookups of keys presented lately, each kept while the registry has not changed since it was
   * made (`revision`: an issue, plan change or revocation moves it, and the next call looks
   * again). Under load the key's SHA-256 and the lookup around it took 1.0–1.4 % of a keyed
   * call's main thread (perf, cpu-clock). Bounded, so the keys held in memory are the last few
   * thousand presented that the registry holds, which the process sees in every request's
   * headers anyway; never written anywhere.
   */
  private readonly recent = new Map<string, { revision: number; lookup: KeyLookup }>();

  /** A key the registry does not hold: it may have been issued a moment ago, so look again once caught up. */
  private async caughtUp(hash: string): Promise<KeyLookup> {
    const { runner } = this.deps;
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

/** Keys whose lookup is remembered (see KeyResolver.recent); past this, the oldest goes. */
const REMEMBERED_KEYS = 4_096;

function classify(record: KeyRecord): KeyLookup {
  return record.revoked ? { status: 'revoked', record } : { status: 'active', record };
}
