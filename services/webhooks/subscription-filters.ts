import type { EventData } from '../../contracts/events.ts';
import type { UpdateWebhookRequest } from '../../contracts/webhooks.ts';

/**
 * A subscription's optional filters, wire name → the name its events and record use: the one list
 * the request, the events, the fold and the view read, so a new filter is added here once (the
 * types below and subscription-filters.unit.test refuse a list that misses a schema's field).
 * Kept in the view's order: the view's keys come out in it.
 */
export const FILTER_FIELDS = {
  timeframes: 'timeframes',
  assets: 'assets',
  min_confidence: 'minConfidence',
  timeframe: 'timeframe',
  exchange: 'exchange',
  top_n: 'topN',
  cadence: 'cadence',
} as const;

export type WireFilter = keyof typeof FILTER_FIELDS;
export type EventFilter = (typeof FILTER_FIELDS)[WireFilter];

/** The filters as the subscription events carry them (each optional). */
export type EventFilters = Pick<EventData<'SubscriptionUpdated'>, EventFilter>;
/** The filters in the request's and the view's words (each optional). */
export type WireFilters = { [W in WireFilter]?: EventFilters[(typeof FILTER_FIELDS)[W]] };

// Compile-time halves of the unit test: every optional setting of the event and of a PATCH is here.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _eventNames: Same<
  EventFilter,
  Exclude<keyof EventData<'SubscriptionUpdated'>, 'subscriptionId' | 'url' | 'events'>
> = true;
const _wireNames: Same<WireFilter, Exclude<keyof UpdateWebhookRequest, 'url' | 'events'>> = true;
void _eventNames;
void _wireNames;

const ENTRIES = Object.entries(FILTER_FIELDS) as [WireFilter, EventFilter][];

/** The event names of the filters, in the list's order. */
export const EVENT_FILTERS: readonly EventFilter[] = ENTRIES.map(([, event]) => event);

/** A filter is held when it has a value: absent (and a PATCH's null, which removes it) is not. */
const held = (value: unknown): boolean => value !== undefined && value !== null;

/** Wire-named filters as the events record them; absent stays absent. */
export function eventFiltersOf(wire: Partial<Record<WireFilter, unknown>>): EventFilters {
  const out: Record<string, unknown> = {};
  for (const [w, e] of ENTRIES) if (held(wire[w])) out[e] = wire[w];
  return out as EventFilters;
}

/** The filters a record (or event) holds, by their event names; absent stays absent. */
export function heldFilters(from: Partial<Record<EventFilter, unknown>>): EventFilters {
  const out: Record<string, unknown> = {};
  for (const e of EVENT_FILTERS) if (held(from[e])) out[e] = from[e];
  return out as EventFilters;
}

/** A record's filters in the wire's words (the view's); absent stays absent. */
export function wireFiltersOf(from: Partial<Record<EventFilter, unknown>>): WireFilters {
  const out: Record<string, unknown> = {};
  for (const [w, e] of ENTRIES) if (held(from[e])) out[w] = from[e];
  return out as WireFilters;
}
