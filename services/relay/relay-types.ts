import type { Config } from '../../contracts/config.ts';
import { isEventType } from '../../contracts/events.ts';
import { splitList } from '../../contracts/setting-lists.ts';

/**
 * RELAY_EVENT_TYPES as the relay's `types` option: null for `*`; split as every list setting
 * (splitList); an unknown name, or a list of none, stops the start.
 */
export function relayTypes(config: Pick<Config, 'RELAY_EVENT_TYPES'>): ReadonlySet<string> | null {
  if (config.RELAY_EVENT_TYPES.trim() === '*') return null;
  const names = splitList(config.RELAY_EVENT_TYPES);
  if (names.length === 0) throw new Error('RELAY_EVENT_TYPES names no event type (set names or *)');
  const unknown = names.filter((n) => !isEventType(n));
  if (unknown.length > 0)
    throw new Error(`RELAY_EVENT_TYPES names unknown event types: ${unknown.join(', ')}`);
  return new Set(names);
}
