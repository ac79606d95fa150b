import { describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../../contracts/events.ts';
import { relayTypes } from './relay-types.ts';

describe('relayTypes (RELAY_EVENT_TYPES as the relay reads it)', () => {
  it('splits the list as every list setting: trimmed, an empty entry (a trailing comma) dropped', () => {
    expect(relayTypes({ RELAY_EVENT_TYPES: 'VerdictRecorded,' })).toEqual(new Set(['VerdictRecorded']));
    expect(relayTypes({ RELAY_EVENT_TYPES: ' VerdictRecorded, ,RegimeShifted ' })).toEqual(
      new Set(['VerdictRecorded', 'RegimeShifted']),
    );
    expect(relayTypes({ RELAY_EVENT_TYPES: ' * ' })).toBeNull();
  });

  // The setting's name is the configuration check's to give (loadConfig, setting-lists.unit.test.ts).
  it('refuses a list of no entry and an unknown name, listing the event types', () => {
    for (const empty of ['', ',', ' , ,']) {
      expect(() => relayTypes({ RELAY_EVENT_TYPES: empty })).toThrow(/^names no event type/);
    }
    expect(() => relayTypes({ RELAY_EVENT_TYPES: 'VerdictRecorded,NoSuchEvent,' })).toThrow(
      `names unknown event types: NoSuchEvent; the event types are ${EVENT_TYPES.join(', ')}`,
    );
  });
});
