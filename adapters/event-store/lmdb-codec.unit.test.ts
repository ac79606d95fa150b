import { pack, unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../../contracts/events.ts';
import { encodeStoredEvent, KNOWN_TYPE_CODES, TYPE_NAMES, typeCodeOf } from './lmdb-codec.ts';

/**
 * The codes stored logs hold, as released: a code once given is never changed or reused, so this
 * list only grows (append the new names here when they get their codes in TYPE_NAMES).
 */
const RELEASED = [
  'VerdictRecorded',
  'VerdictOutcomeResolved',
  'RegimeShifted',
  'QuotaDebited',
  'QuotaDebitsRecorded',
  'ChatQuotaConsumed',
  'ChatQuotaRefunded',
  'DeliveryAttempted',
  'DeliverySequenced',
  'DeliverySucceeded',
  'DeliveryFailed',
  'PaymentAuthorized',
  'PaymentSettlementPending',
  'PaymentSettled',
  'PaymentSettlementFailed',
  'PaymentReleased',
  'ApiKeyIssued',
  'ApiKeyPlanChanged',
  'ApiKeyRevoked',
  'SubscriptionCreated',
  'SubscriptionDeleted',
  'SubscriptionDisabled',
  'SubscriptionReEnabled',
  'SubscriptionSecretRotated',
  'ReplayClockAnchored',
  'QuotaDebitsReturned',
  'RiskShifted',
  'DeliveryQueued',
  'HistoryAnchored',
  'PaymentAnswerServed',
  'PaymentIdentifierClaimed',
  'SubscriptionSecretResealed',
  'SubscriptionUpdated',
];

const stored = (type: string) =>
  encodeStoredEvent({
    id: '0190f5a8-7c3e-7000-8000-000000000001',
    type,
    stream: 's',
    revision: 0,
    position: 1,
    recordedAt: '2026-11-28T16:00:00.000Z',
    correlationId: '0190f5a8-7c3e-7000-8000-000000000001',
    causationId: null,
    data: {},
  });

describe('LMDB event type codes', () => {
  // A type stored as text is invisible to the newer-log guard (it records codes only): a build
  // that does not know it would open the log and its parser skip those events without a word.
  it('every type of the event catalog has a code', () => {
    const uncoded = EVENT_TYPES.filter((type) => !(TYPE_NAMES as readonly string[]).includes(type));
    expect(uncoded, 'give these a code: append them to TYPE_NAMES in lmdb-codec.ts').toEqual([]);
  });

  it('codes are only appended: none released is moved, reused or dropped', () => {
    expect(TYPE_NAMES.slice(0, RELEASED.length)).toEqual(RELEASED);
    expect(new Set(TYPE_NAMES).size).toBe(TYPE_NAMES.length);
    expect(KNOWN_TYPE_CODES).toBe(TYPE_NAMES.length);
    // One byte per code.
    expect(KNOWN_TYPE_CODES).toBeLessThanOrEqual(255);
  });

  it('every catalog type is stored as its code and reads back as its name', () => {
    for (const type of EVENT_TYPES) {
      const value = stored(type);
      expect(typeCodeOf(value), type).toBeGreaterThan(0);
      expect(typeCodeOf(value), type).toBe(TYPE_NAMES.indexOf(type as never) + 1);
      expect((unpack(pack(value)) as { type: string }).type).toBe(type);
    }
  });

  it('a name outside the catalog is stored as text, code 0, and reads back as it was', () => {
    const value = stored('NotADomainEvent');
    expect(value.type).toBe('NotADomainEvent');
    expect(typeCodeOf(value)).toBe(0);
    expect((unpack(pack(value)) as { type: string }).type).toBe('NotADomainEvent');
  });
});
