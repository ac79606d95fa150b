import { parseDomainEvent } from '../../contracts/events.ts';
import {
  type Exchange,
  type FeedKind,
  marketKey,
  type Regime,
  type Timeframe,
} from '../../contracts/market.ts';
import type { Projection } from '../../projections/projection.ts';
import type { Passage } from './passages.ts';

/**
 * Live facts the knowledge tools can quote: the latest regime per market and the venues and
 * markets that have verdicts. A projection over the log like any other, so a rebuild from
 * position 0 gives the same facts. Only what changes rarely (a regime and since when) is kept in
 * the passages, so the search ETag does not change on every verdict.
 */
export interface MarketFact {
  exchange: Exchange;
  coin: string;
  timeframe: Timeframe;
  regime: Regime;
  /** Close time (Unix ms) of the candle on which the current regime was first seen. */
  since: number;
  feed: FeedKind;
}

export interface KnowledgeFacts {
  markets: Record<string, MarketFact>;
}

export const knowledgeFactsProjection: Projection<KnowledgeFacts> = {
  name: 'knowledge-facts',
  version: 1,
  initial: () => ({ markets: {} }),
  evolve(state, recorded) {
    const event = parseDomainEvent(recorded);
    if (event?.type !== 'VerdictRecorded') return state;
    const d = event.data;
    const key = marketKey(d.exchange, d.coin, d.timeframe);
    const current = state.markets[key];
    if (current && current.regime === d.regime && current.feed === d.feed) return state;
    state.markets[key] = {
      exchange: d.exchange,
      coin: d.coin,
      timeframe: d.timeframe,
      regime: d.regime,
      since: d.candleCloseTime,
      feed: d.feed,
    };
    return state;
  },
};

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/** The facts as passages: one per coin and venue, and one about the venues served. */
export function livePassages(facts: KnowledgeFacts, venues: { configured: readonly string[] }): Passage[] {
  const byCoin = new Map<string, MarketFact[]>();
  for (const fact of Object.values(facts.markets)) {
    const key = `${fact.exchange}:${fact.coin}`;
    byCoin.set(key, [...(byCoin.get(key) ?? []), fact]);
  }
  const passages: Passage[] = [];
  const served = new Map<string, { coins: Set<string>; timeframes: Set<string>; feeds: Set<string> }>();
  for (const [key, list] of [...byCoin.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const { exchange, coin } = list[0]!;
    list.sort((a, b) => a.timeframe.localeCompare(b.timeframe, 'en', { numeric: true }));
    const readings = list.map(
      (f) => `on ${f.timeframe} the regime is ${f.regime} since ${iso(f.since)} (${f.feed} data)`,
    );
    passages.push({
      id: `live#regime-${key}`,
      source_type: 'live',
      source_url: `mcp://tool/get_market_regime?coin=${coin}&exchange=${exchange}`,
      title: `Latest market regime of ${coin} on ${exchange}`,
      text: `Latest regime of ${coin} on ${exchange}: ${readings.join('; ')}.`,
    });
    const venue = served.get(exchange) ?? { coins: new Set(), timeframes: new Set(), feeds: new Set() };
    venue.coins.add(coin);
    for (const f of list) {
      venue.timeframes.add(f.timeframe);
      venue.feeds.add(f.feed);
    }
    served.set(exchange, venue);
  }
  const lines = [...served.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([exchange, v]) =>
        `${exchange} serves verdicts for ${v.coins.size} markets (${[...v.coins].sort().join(', ')}) on ${[...v.timeframes].join(', ')} from ${[...v.feeds].join(' and ')} data.`,
    );
  passages.push({
    id: 'live#venues',
    source_type: 'live',
    source_url: 'GET /readyz',
    title: 'Venues and markets served now (live venues)',
    text: [
      `The venues configured for live market data are ${venues.configured.join(', ')}.`,
      ...(lines.length > 0
        ? lines
        : ['No verdict has been recorded yet, so no market is served with history yet.']),
      'GET /readyz reports whether each venue answers right now.',
    ].join(' '),
  });
  return passages;
}
