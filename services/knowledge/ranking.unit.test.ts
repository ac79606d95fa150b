import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { startApiOnly } from '../../test/service-keys.ts';
import type { RunningService } from '../service.ts';
import { staticCorpus } from './corpus.ts';
import { type KnowledgeFacts, livePassages } from './facts.ts';
import { type OpenApiDocument, routePassages } from './generated.ts';
import { KnowledgeIndex } from './search-index.ts';

/**
 * Ranking quality on questions a user would ask, each with the passage (or one of the passages)
 * that answers it. The right passage must be in the top 3 for at least 90 % of them.
 */
const QUESTIONS: [string, string[]][] = [
  ['how is confidence computed', ['docs/methodology.md#how-confidence-is-computed']],
  ['what does squeeze mean', ['docs/methodology.md#market-regimes']],
  ['price of a 1m trade call', ['pricing#pay-per-call']],
  [
    'how do I verify a webhook signature',
    ['services/webhooks/README.md#deliveries', 'services/webhooks/README.md#receiver'],
  ],
  ['which venues are live', ['live#venues']],
  ['INVALID_MODEL', ['errors#INVALID_MODEL']],
  ['how much does the pro plan cost', ['pricing#plans']],
  ['how many calls a month on the free plan', ['pricing#plans']],
  ['how many chats per month do I get on starter', ['pricing#chat-quota']],
  ['what happens when my chat quota is used up', ['pricing#chat-quota', 'errors#CHAT_QUOTA_EXHAUSTED']],
  ['what does CHAT_QUOTA_EXHAUSTED mean', ['errors#CHAT_QUOTA_EXHAUSTED']],
  ['QUERY_TOO_SHORT error', ['errors#QUERY_TOO_SHORT']],
  ['what is error -32602', ['errors#-32602']],
  ['what does -32003 mean', ['errors#-32003']],
  ['invalid_content_type', ['errors#invalid_content_type']],
  ['how much is a funding arbitrage scan', ['pricing#pay-per-call']],
  ['price of get_market_regime', ['pricing#pay-per-call']],
  ['what arguments does get_trade_call take', ['contract#get_trade_call']],
  ['scan_trade_calls parameters rankBy', ['contract#scan_trade_calls']],
  ['what fields does scan_funding_arb return', ['contract#scan_funding_arb']],
  ['how is the funding spread annualized', ['docs/methodology.md#funding-arbitrage']],
  ['how are funding rates normalised across venues', ['docs/methodology.md#funding-arbitrage']],
  ['which indicators vote in the verdict', ['docs/methodology.md#verdicts-buy-sell-or-hold']],
  [
    'what is the HOLD band',
    [
      'docs/methodology.md#verdicts-buy-sell-or-hold',
      'docs/evaluation.md#direction-only-where-earned-the-gate',
    ],
  ],
  ['how are regimes classified with ADX and choppiness', ['docs/methodology.md#market-regimes']],
  ['why does the regime not flicker hysteresis', ['docs/methodology.md#market-regimes']],
  [
    'do the signals beat the baselines',
    [
      'docs/evaluation.md#test-months-from-2025-06-01-per-timeframe',
      'docs/evaluation.md#summary',
      'README.md#the-signals-honestly',
    ],
  ],
  ['walk-forward evaluation method', ['docs/evaluation.md#method']],
  [
    'results of the 2022 era LUNA collapse',
    ['docs/evaluation.md#2022-era-shipped-fit', 'docs/evaluation.md#method'],
  ],
  ['what is the regime of BTC on BINANCE', ['live#regime-BINANCE:BTC']],
  ['latest regime ETH', ['live#regime-BINANCE:ETH']],
  ['what is the hit rate of the 5m calls on BINANCE_SPOT', ['live#track-record-BINANCE_SPOT:5m']],
  ['track record of the 1h verdicts on BINANCE', ['live#track-record-BINANCE:1h']],
  ['how do I get an API key', ['README.md#using-it-api-keys']],
  ['sign in with ethereum free key', ['README.md#using-it-api-keys']],
  [
    'how do I pay per call with x402',
    ['README.md#using-it-pay-per-call-no-account-x402', 'pricing#pay-per-call'],
  ],
  [
    'which webhook events can I subscribe to',
    ['services/webhooks/README.md#webhooks', 'README.md#using-it-webhooks'],
  ],
  [
    'webhook retry schedule',
    ['services/webhooks/README.md#webhooks', 'services/webhooks/README.md#deliveries'],
  ],
  ['SSRF guard internal addresses', ['services/webhooks/README.md#ssrf-guard']],
  [
    'how do I verify a verdict was recorded',
    ['README.md#using-it-verify-a-verdict', 'docs/methodology.md#verifiable-track-record'],
  ],
  ['how do I run the service with redis and nats', ['README.md#running']],
  ['what roles can the service run', ['README.md#running']],
  ['what does the replay feed mean', ['README.md#running-replayed-data-says-so', 'README.md#running']],
  ['how do I run the tests', ['README.md#testing']],
  ['which http routes exist', ['contract#routes']],
  ['how do I export the verdict history', ['contract#routes-history']],
  ['where is the OpenAPI document', ['contract#routes-discovery']],
  ['does search count against my quota', ['pricing#plans', 'README.md#knowledge-search-and-chat']],
  ['what is the MCP endpoint', ['contract#routes', 'README.md#using-it-mcp']],
  ['what does search_knowledge return', ['contract#search_knowledge']],
  [
    'calibration isotonic regression',
    ['docs/methodology.md#how-confidence-is-computed', 'docs/evaluation.md#method'],
  ],
];

const facts: KnowledgeFacts = {
  markets: {
    'BINANCE:BTC:1h': {
      exchange: 'BINANCE',
      coin: 'BTC',
      timeframe: '1h',
      regime: 'trending-up',
      since: Date.UTC(2026, 0, 5),
      feed: 'replay',
    },
    'BINANCE:BTC:4h': {
      exchange: 'BINANCE',
      coin: 'BTC',
      timeframe: '4h',
      regime: 'ranging',
      since: Date.UTC(2026, 0, 3),
      feed: 'replay',
    },
    'BINANCE:ETH:1h': {
      exchange: 'BINANCE',
      coin: 'ETH',
      timeframe: '1h',
      regime: 'squeeze',
      since: Date.UTC(2026, 0, 6),
      feed: 'replay',
    },
  },
  trackRecord: {
    'BINANCE_SPOT:5m': {
      exchange: 'BINANCE_SPOT',
      timeframe: '5m',
      published: { calls: 812, hits: 330, holds: 81, through: Date.UTC(2026, 0, 5) },
      day: Date.UTC(2026, 0, 6),
      current: { calls: 12, hits: 5, holds: 1 },
    },
    'BINANCE:1h': {
      exchange: 'BINANCE',
      timeframe: '1h',
      published: { calls: 0, hits: 0, holds: 120, through: Date.UTC(2026, 0, 5) },
      day: Date.UTC(2026, 0, 6),
      current: { calls: 0, hits: 0, holds: 3 },
    },
  },
};

describe('knowledge ranking', () => {
  // The route list is generated from the OpenAPI document of a started app (in-process defaults).
  let service: RunningService;
  let document: OpenApiDocument;
  beforeAll(async () => {
    service = await startApiOnly();
    document = (service.app as unknown as { swagger(): OpenApiDocument }).swagger();
  });
  afterAll(async () => {
    await service?.stop();
  });

  it('puts the right passage in the top 3 for at least 90 % of the questions', async () => {
    const config = loadConfig({});
    const index = new KnowledgeIndex([
      ...(await staticCorpus(config)),
      ...routePassages(document, '/docs'),
      ...livePassages(facts, { configured: config.LIVE_EXCHANGES }),
    ]);
    expect(QUESTIONS.length).toBeGreaterThanOrEqual(40);
    const misses: string[] = [];
    for (const [question, wanted] of QUESTIONS) {
      for (const id of wanted) expect(index.get(id), `${id} exists`).toBeDefined();
      const top = index.search(question, 3).results.map((r) => r.id);
      // A long section is cut into passages `<id>`, `<id>-2`...: any of them is that section.
      const right = (id: string) => wanted.some((w) => id === w || id.startsWith(`${w}-`));
      if (!top.some(right)) misses.push(`${question} → ${top.join(', ')}`);
    }
    const score = (QUESTIONS.length - misses.length) / QUESTIONS.length;
    console.log(
      `knowledge ranking: ${QUESTIONS.length - misses.length}/${QUESTIONS.length} = ${(100 * score).toFixed(1)} % right passage in top 3` +
        (misses.length ? `\n  misses:\n  ${misses.join('\n  ')}` : ''),
    );
    expect(score).toBeGreaterThanOrEqual(0.9);
  });
});
