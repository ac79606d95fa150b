import type { Logger } from 'pino';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { DomainEvent } from '../../contracts/events.ts';
import type { Projection } from '../../projections/projection.ts';
import { findById, type KeyRecord, type KeyRegistry, keyRegistryProjection } from './key-registry.ts';

/** A key revoked, as the registry that folded its revocation holds it. */
export type RevokedKey = Readonly<Pick<KeyRecord, 'keyId' | 'keyHash'>>;

/**
 * The keys a running key registry revokes, told as it folds each revocation, whoever recorded it
 * (this api, another over the same store, the keys CLI): what a key holds open past its request
 * (an MCP session and its event stream) ends with it, with no request of the key's and no polling.
 *
 * The registry runs `projection`: the key registry's own fold, which afterwards tells every
 * listener of a key it has just marked revoked. Told after the fold's page, off its stack (a
 * microtask), so a listener neither slows the fold nor stops it by throwing; the registry already
 * holds the key revoked then, so a request racing the listener is refused. A registry that
 * re-folds the log (a rebuild) tells its revocations again: a listener holds nothing of them.
 */
export class KeyRevocations {
  private readonly listeners = new Set<(key: RevokedKey) => void>();

  constructor(private readonly logger?: Logger) {}

  /** Tells `listener` of each key revoked from now on; returns the way to stop. */
  onRevoked(listener: (key: RevokedKey) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** keyRegistryProjection (its name, version and state), telling of each key it revokes. */
  readonly projection: Projection<KeyRegistry> = {
    name: keyRegistryProjection.name,
    version: keyRegistryProjection.version,
    eventTypes: keyRegistryProjection.eventTypes!,
    initial: keyRegistryProjection.initial,
    evolve: (state, event: RecordedEvent) => this.told(keyRegistryProjection.evolve(state, event), event),
    evolveValid: (state, event: DomainEvent) =>
      this.told(keyRegistryProjection.evolveValid!(state, event), event),
  };

  private told(state: KeyRegistry, event: { type: string; data: unknown }): KeyRegistry {
    if (event.type !== 'ApiKeyRevoked' || this.listeners.size === 0) return state;
    const keyId = (event.data as { keyId?: unknown } | null)?.keyId;
    const record = typeof keyId === 'string' ? findById(state, keyId) : undefined;
    if (record?.revoked) {
      const key: RevokedKey = Object.freeze({ keyId: record.keyId, keyHash: record.keyHash });
      queueMicrotask(() => this.tell(key));
    }
    return state;
  }

  private tell(key: RevokedKey): void {
    for (const listener of this.listeners) {
      try {
        listener(key);
      } catch (err) {
        this.logger?.error({ err, keyId: key.keyId }, 'a listener of key revocations failed');
      }
    }
  }
}
