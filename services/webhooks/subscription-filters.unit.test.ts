import { describe, expect, it } from 'vitest';
import { SubscriptionCreated, SubscriptionUpdated } from '../../contracts/events.ts';
import { UpdateWebhookRequest, WebhookView } from '../../contracts/webhooks.ts';
import { EVENT_FILTERS, FILTER_FIELDS, heldFilters, wireFiltersOf } from './subscription-filters.ts';

const sorted = (keys: Iterable<string>) => [...keys].sort();

describe('the one list of a subscription’s filters', () => {
  it('names every optional setting of the events and of a PATCH, and each is a field of the view', () => {
    const updated = Object.keys(SubscriptionUpdated.shape).filter(
      (k) => !['subscriptionId', 'url', 'events'].includes(k),
    );
    expect(sorted(EVENT_FILTERS)).toEqual(sorted(updated));
    // The create carries the same filters (besides who, the secret and the payload version).
    for (const field of updated) expect(SubscriptionCreated.shape).toHaveProperty(field);
    const patch = Object.keys(UpdateWebhookRequest.shape).filter((k) => !['url', 'events'].includes(k));
    expect(sorted(Object.keys(FILTER_FIELDS))).toEqual(sorted(patch));
    for (const wire of Object.keys(FILTER_FIELDS)) expect(WebhookView.shape).toHaveProperty(wire);
  });

  it('keeps a held value (0 included) and drops an absent or removed one', () => {
    const record = { minConfidence: 0, topN: undefined, cadence: '1h', url: 'x' } as const;
    expect(heldFilters(record)).toEqual({ minConfidence: 0, cadence: '1h' });
    expect(wireFiltersOf(record)).toEqual({ min_confidence: 0, cadence: '1h' });
  });
});
