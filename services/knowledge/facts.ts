import {
  type Exchange,
  type FeedKind,
  marketKey,
  type Regime,
  type Timeframe,
} from '../../contracts/market.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { headingAnchor, type Passage } from './passages.ts';

/**
 * The live regimes as a document of the index (GET /knowledge/live.md), a section per market: a
 * regime passage's source_url opens there over HTTP, at its heading, as every document's does.
 */
export const LIVE_DOCUMENT = 'live.md';
const LIVE_TITLE = 'Latest market regimes';
const LIVE_PREFACE =
  'Folded from the event log by the knowledge-facts projection: the latest regime of each market with a verdict, as the index holds it. The MCP tool get_market_regime (coin, exchange), or POST /x402/get_market_regime, answers a reading live.';

/**
 * Live facts the knowledge tools can quote: the latest regime per market, the track record per
 * venue and timeframe, and the venues and markets that have verdicts. A projection over the log
 * like any other, so a rebuild from position 0 gives the same facts. Only what changes rarely is
 * kept in the passages (a regime and since when; the track record as of the end of a UTC day),
 * so the search ETag does not change on every verdict or outcome.
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

export interface OutcomeCounts {
  /** BUY/SELL calls whose outcome is known, and how many of them beat the fee. */
  calls: number;
  hits: number;
  holds: number;
}

export interface TrackRecordFact {
  exchange: Exchange;
  timeframe: Timeframe;
  /** Counts of the outcomes folded before the current day's first one, and that day (ms). */
  published: OutcomeCounts & { through: number | null };
  /** UTC day (start, ms) of the verdict candles being counted now, and their counts so far. */
  day: number;
  current: OutcomeCounts;
}

export interface KnowledgeFacts {
  markets: Record<string, MarketFact>;
  trackRecord: Record<string, TrackRecordFact>;
}

const DAY_MS = 86_400_000;
const zero = (): OutcomeCounts => ({ calls: 0, hits: 0, holds: 0 });

function foldOutcome(
  state: KnowledgeFacts,
  d: {
    exchange: Exchange;
    timeframe: Timeframe;
    candleCloseTime: number;
    result: 'hit' | 'miss' | 'no-call';
  },
): void {
  const key = `${d.exchange}:${d.timeframe}`;
  const day = Math.floor(d.candleCloseTime / DAY_MS) * DAY_MS;
  let fact = state.trackRecord[key];
  if (fact === undefined) {
    fact = {
      exchange: d.exchange,
      timeframe: d.timeframe,
      published: { ...zero(), through: null },
      day,
      current: zero(),
    };
    state.trackRecord[key] = fact;
  }
  if (day > fact.day) {
    // A new day begins: what was counted up to now becomes the quoted figure, through the
    // previous day. A late outcome of an earlier day is counted in the current one.
    fact.published = {
      calls: fact.published.calls + fact.current.calls,
      hits: fact.published.hits + fact.current.hits,
      holds: fact.published.holds + fact.current.holds,
      through: fact.day,
    };
    fact.day = day;
    fact.current = zero();
  }
  if (d.result === 'no-call') fact.current.holds += 1;
  else {
    fact.current.calls += 1;
    if (d.result === 'hit') fact.current.hits += 1;
  }
}

export const knowledgeFactsProjection: Projection<KnowledgeFacts> = defineProjection({
  name: 'knowledge-facts',
  version: 2,
  eventTypes: ['VerdictRecorded', 'VerdictOutcomeResolved'],
  initial: (): KnowledgeFacts => ({ markets: {}, trackRecord: {} }),
  evolve(state, event) {
    if (event.type === 'VerdictOutcomeResolved') {
      foldOutcome(state, event.data);
      return state;
    }
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
});

const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/**
 * The live document (LIVE_DOCUMENT): the passages of livePassages that open in it, each a section
 * under its title, the text as indexed.
 */
export function liveDocument(passages: readonly Passage[]): string {
  const sections = passages
    .filter((p) => p.source_url.startsWith(`/knowledge/${LIVE_DOCUMENT}#`))
    .map((p) => `## ${p.title}\n\n${p.text}\n`);
  const body = sections.length > 0 ? sections.join('\n') : 'No verdict has been recorded yet.\n';
  return `# ${LIVE_TITLE}\n\n${LIVE_PREFACE}\n\n${body}`;
}

/**
 * The facts as passages: one per coin and venue (its source_url a section of LIVE_DOCUMENT), and
 * one about the venues served.
 */
export function livePassages(facts: KnowledgeFacts, venues: { configured: readonly string[] }): Passage[] {
  const byCoin = new Map<string, MarketFact[]>();
  for (const fact of Object.values(facts.markets)) {
    const key = `${fact.exchange}:${fact.coin}`;
    byCoin.set(key, [...(byCoin.get(key) ?? []), fact]);
  }
  const passages: Passage[] = [];
  const served = new Map<string, { coins: Set<string>; timeframes: Set<string>; feeds: Set<string> }>();
  const anchors = new Map<string, number>();
  headingAnchor(LIVE_TITLE, anchors);
  for (const [key, list] of [...byCoin.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const { exchange, coin } = list[0]!;
    list.sort((a, b) => a.timeframe.localeCompare(b.timeframe, 'en', { numeric: true }));
    const readings = list.map(
      (f) => `on ${f.timeframe} the regime is ${f.regime} since ${iso(f.since)} (${f.feed} data)`,
    );
    const title = `Latest market regime of ${coin} on ${exchange}`;
    passages.push({
      id: `live#regime-${key}`,
      source_type: 'live',
      source_url: `/knowledge/${LIVE_DOCUMENT}#${headingAnchor(title, anchors)}`,
      title,
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
  for (const fact of Object.values(facts.trackRecord).sort((a, b) =>
    `${a.exchange}:${a.timeframe}`.localeCompare(`${b.exchange}:${b.timeframe}`, 'en', { numeric: true }),
  )) {
    const { calls, hits, holds, through } = fact.published;
    if (through === null) continue;
    const rate = calls > 0 ? `, hit rate ${((100 * hits) / calls).toFixed(1)}% (${hits} of ${calls})` : '';
    passages.push({
      id: `live#track-record-${fact.exchange}:${fact.timeframe}`,
      source_type: 'live',
      source_url: '/api/track-record',
      title: `Track record of ${fact.timeframe} verdicts on ${fact.exchange}`,
      text:
        `Track record of the ${fact.timeframe} verdicts on ${fact.exchange} with a known outcome, for verdict candles through ${iso(through).slice(0, 10)} (UTC): ` +
        `${calls} BUY/SELL calls${rate}, and ${holds} HOLD verdicts. ` +
        'A call is a hit when its direction beat the fee at the methodology horizon. GET /api/track-record has the live figures, the random-call baseline and the confidence buckets.',
    });
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
    source_url: '/readyz',
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
