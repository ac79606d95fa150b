import type { Config } from '../../contracts/config.ts';
import { parseEventTypes } from '../../contracts/setting-lists.ts';

/**
 * RELAY_EVENT_TYPES as the relay's `types` option: null for `*`. Read by the list settings' parser
 * (parseEventTypes), which the configuration's check calls too, so a misspelled name stops the
 * start (on a line naming the setting) before anything is opened.
 */
export function relayTypes(config: Pick<Config, 'RELAY_EVENT_TYPES'>): ReadonlySet<string> | null {
  return parseEventTypes(config.RELAY_EVENT_TYPES);
}
