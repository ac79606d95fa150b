import type { EventStore } from '../../adapters/event-store/port.ts';
import { type KeyRegistry, keyRegistryProjection } from './key-registry.ts';

/** The key registry folded straight from the log, for one-shot readers such as the CLI. */
export async function foldKeyRegistry(store: EventStore, pageSize = 1_000): Promise<KeyRegistry> {
  let state = keyRegistryProjection.initial();
  let after = 0;
  for (;;) {
    const page = await store.readAll({ after, maxCount: pageSize });
    for (const event of page) state = keyRegistryProjection.evolve(state, event);
    if (page.length < pageSize) return state;
    after = page[page.length - 1]!.position;
  }
}
