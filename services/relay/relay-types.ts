import type { Config } from '../../contracts/config.ts';
import { isEventType } from '../../contracts/events.ts';

/** RELAY_EVENT_TYPES as the relay's `types` option: null for `*`; an unknown name stops the start. */
export function relayTypes(config: Pick<Config, 'RELAY_EVENT_TYPES'>): ReadonlySet<string> | null {
  if (config.RELAY_EVENT_TYPES.trim() === '*') return null;
  const names = config.RELAY_EVENT_TYPES.split(',').map((s) => s.trim());
  const unknown = names.filter((n) => !isEventType(n));
  if (unknown.length > 0)
    throw new Error(`RELAY_EVENT_TYPES names unknown event types: ${unknown.join(', ')}`);
  return new Set(names);
}
