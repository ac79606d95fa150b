import type { EventStore } from '../../adapters/event-store/port.ts';
import { foldLog } from '../../projections/projection.ts';
import { type KeyRegistry, keyRegistryProjection } from './key-registry.ts';

/** The key registry folded straight from the log, for one-shot readers such as the CLI. */
export async function foldKeyRegistry(store: EventStore, pageSize = 1_000): Promise<KeyRegistry> {
  return (await foldLog(store, keyRegistryProjection, pageSize)).state;
}
