import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { ConfigError, loadConfig } from '../../contracts/config.ts';
import { newEvent } from '../../contracts/events.ts';
import {
  chatRequest,
  checkChat,
  checkSearch,
  SearchRequest,
  type SourceType,
  searchable,
} from '../../contracts/knowledge.ts';
import { foldLog } from '../../projections/projection.ts';
import { QuotaCounters } from '../metering/quota-rebuild.ts';
import { ChatQuota, chatKey, chatQuotaProjection } from './chat-quota.ts';
import {
  DONT_KNOW,
  expandQuestion,
  extractiveAnswer,
  questionKind,
  questionTerms,
  sentences,
} from './extractive.ts';
import { knowledgeFactsProjection, livePassages } from './facts.ts';
import { headingAnchors, markdownPassages } from './passages.ts';
import { excerpt, KnowledgeIndex } from './search-index.ts';
import { contentTerms, stem, words } from './text.ts';

describe('markdown passages', () => {
  const doc = [
    '# Guide',
    'Intro with a [link](https://x.example) and **bold** and `code`.',
    '## Prices',
    '| tool | price |',
    '|---|---|',
    '| get_trade_call | 0.02 USD |',
    '```sh',
    'curl -s localhost:8080/api/search',
    '```',
    '## Prices',
    'Again.',
  ].join('\n');

  it('cuts sections into passages with stable ids, plain text, tables as sentences', () => {
    const passages = markdownPassages(doc, { path: 'docs/guide.md', title: 'Guide', source_type: 'doc' });
    expect(passages.map((p) => p.id)).toEqual([
      'docs/guide.md#guide',
      'docs/guide.md#prices',
      'docs/guide.md#prices-2',
    ]);
    expect(passages[0]!.text).toBe('Intro with a link and bold and code.');
    expect(passages[1]!.text).toBe('tool get_trade_call; price 0.02 USD.\ncurl -s localhost:8080/api/search');
    expect(passages[1]!.title).toBe('Guide › Prices');
  });
});

describe('heading anchors', () => {
  it('are GitHub’s (underscores kept, a hyphen per space, -1 for a repeat), while passage ids keep theirs', () => {
    const md = [
      '# Error codes',
      '## Error code `INVALID_MODEL`',
      '## Prices — plans & quotas',
      '## What’s **new**?',
      '## क्या है',
      '## Error codes',
      '## Error codes-1',
      '## Error codes',
    ].join('\n');
    // What github-slugger gives for the same headings, rendered.
    expect(headingAnchors(md)).toEqual([
      'error-codes',
      'error-code-invalid_model',
      'prices--plans--quotas',
      'whats-new',
      'क्या-है',
      'error-codes-1',
      'error-codes-1-1',
      'error-codes-2',
    ]);
    const passages = markdownPassages(`${md.split('\n').slice(0, 2).join('\n')}\nIt means…`, {
      path: 'errors.md',
      title: 'Error codes',
      source_type: 'errors',
    });
    expect(passages.map((p) => [p.id, p.source_url])).toEqual([
      ['errors.md#error-code-invalidmodel', 'errors.md#error-code-invalid_model'],
    ]);
  });
});

describe('bold lead-ins', () => {
  it('name the passages their topic is cut into for length, not only the first', () => {
    const long = 'The session goes on. '.repeat(40).trim();
    const md = `## Using it\n\n**MCP.** POST /mcp.\n\n${long}\n\n${long}\n\n**Keys.** Send a key.`;
    const passages = markdownPassages(md, { path: 'README.md', title: 'Service', source_type: 'readme' });
    expect(passages.map((p) => [p.id, p.title])).toEqual([
      ['README.md#using-it-mcp', 'Service › Using it › MCP'],
      ['README.md#using-it-mcp-2', 'Service › Using it › MCP'],
      ['README.md#using-it-keys', 'Service › Using it › Keys'],
    ]);
  });

  it('start a passage of their own, named after the lead', () => {
    const md =
      '## Using it\n\n**API keys.** Send `Authorization: Bearer <key>`.\n\n**MCP.** POST /mcp.\nMore.';
    const passages = markdownPassages(md, { path: 'README.md', title: 'Service', source_type: 'readme' });
    expect(passages.map((p) => [p.id, p.title, p.source_url])).toEqual([
      ['README.md#using-it-api-keys', 'Service › Using it › API keys', 'README.md#using-it'],
      ['README.md#using-it-mcp', 'Service › Using it › MCP', 'README.md#using-it'],
    ]);
    expect(passages[1]!.text).toBe('MCP. POST /mcp. More.');
  });
});

describe('angle brackets', () => {
  it('keep placeholders and comparisons as text and drop only layout tags', () => {
    const md = [
      '## Keys',
      '`npm run keys -- revoke <keyId>` and `GET /verify/<stream>/<revision>`.',
      '',
      '| cell | folds |',
      '|---|---|',
      '| spot:5m | fit < 2025-02-01 → pass<br>fit < 2025-04-01 → fail |',
    ].join('\n');
    const passages = markdownPassages(md, { path: 'README.md', title: 'Service', source_type: 'readme' });
    expect(passages[0]!.text).toBe(
      'npm run keys -- revoke <keyId> and GET /verify/<stream>/<revision>.\n' +
        'cell spot:5m; folds fit < 2025-02-01 → pass fit < 2025-04-01 → fail.',
    );
  });
});

describe('terms, excerpts and sentences', () => {
  it('meets word forms and keeps codes whole', () => {
    expect(stem('signatures')).toBe('signature');
    expect(contentTerms('How is confidence computed?')).toEqual(contentTerms('confidence compute'));
    expect(contentTerms('INVALID_MODEL 0.02 x402')).toEqual(['invalid_model', '0.02', 'x402']);
    expect(contentTerms('what is the')).toEqual([]);
    // A possessive names its noun: "a HOLD's confidence" is about a HOLD.
    expect(contentTerms("A HOLD's confidence")).toEqual(contentTerms('hold confidence'));
  });

  it('highlights the matching words of the best window', () => {
    const text = `${'filler '.repeat(60)}Deliveries are signed with a signature header. ${'tail '.repeat(60)}`;
    const out = excerpt(text, new Set(contentTerms('signed signatures')));
    expect(out).toContain('**signed** with a **signature** header');
    expect(out.startsWith('…') && out.endsWith('…')).toBe(true);
  });

  it('splits sentences so that each is a substring of the text', () => {
    const text = 'A 1m call costs 0.05 USD. Plans: free, starter and pro.\nNext line';
    expect(sentences(text)).toEqual([
      'A 1m call costs 0.05 USD.',
      'Plans: free, starter and pro.',
      'Next line',
    ]);
  });
});

describe('extractive answers', () => {
  const index = new KnowledgeIndex([
    {
      id: 'a',
      source_type: 'pricing',
      source_url: 'README.md',
      title: 'Prices',
      text: 'A 1m trade call costs 0.05 USD. Other timeframes cost 0.02 USD.',
    },
    {
      id: 'b',
      source_type: 'doc',
      source_url: 'x.md',
      title: 'Other',
      text: 'Webhooks are signed with HMAC.',
    },
  ]);

  it('quotes sentences of the retrieved passages with [n] citations', () => {
    const answer = extractiveAnswer('price of a 1m trade call', index.retrieve('price of a 1m trade call'));
    expect(answer.grounded).toBe(true);
    // A short best sentence is read with the one after it in its passage.
    expect(answer.answer).toBe('A 1m trade call costs 0.05 USD. Other timeframes cost 0.02 USD. [1]');
    expect(answer.citations).toEqual([
      {
        id: 'a',
        source_url: 'README.md',
        title: 'Prices',
        quote: 'A 1m trade call costs 0.05 USD. … Other timeframes cost 0.02 USD.',
      },
    ]);
  });

  const docs = new KnowledgeIndex([
    {
      id: 'contract',
      source_type: 'contract',
      source_url: 'contracts/tools.ts',
      title: 'Tool get_trade_call: arguments and answer',
      text: 'The tool get_trade_call returns a verdict for a coin and timeframe. Arguments: coin (string, required); timeframe (one of 1m, 5m, 15m, 1h, 4h, 1d, default "15m", optional); exchange (one of BINANCE, BYBIT, optional); includeReasoning (boolean, default true, optional); window (one of 7d, 30d, 90d, all, default "all", optional); limit (integer, from 1 to 1000, default 100, optional); and a few more words so that this sentence is long enough to be read clause by clause rather than as one sentence of the passage, which is how the contract passages read when a tool takes many arguments with many values each.',
    },
    {
      id: 'volatility',
      source_type: 'readme',
      source_url: 'README.md#signals',
      title: 'Service › Signals › Volatility and expected move',
      text: 'Volatility and expected move. Every trade call carries volatility: expected_move_pct is the forecast σ of the log return over the next six candles.',
    },
    {
      id: 'webhooks',
      source_type: 'webhooks',
      source_url: 'services/webhooks/README.md',
      title: 'Webhooks',
      text: 'Deliveries are signed with HMAC-SHA256 of the timestamp and the raw body. A delivery is retried after 5 s, 5 min and 30 min.',
    },
  ]);
  const ask = (question: string) =>
    extractiveAnswer(question, docs.retrieve(expandQuestion(question)), (t) => docs.weight(t));

  it('answers a "which" question with the enumeration of what it names', () => {
    const answer = ask('Which timeframes are supported?');
    expect(answer.grounded).toBe(true);
    const clause = 'timeframe (one of 1m, 5m, 15m, 1h, 4h, 1d, default "15m", optional)';
    expect(answer.answer).toContain(`${clause} [1]`);
    // The clause is quoted as it stands in the passage.
    expect(answer.citations[0]!.quote.split(' … ')).toContain(clause);
    for (const quoted of answer.citations[0]!.quote.split(' … '))
      expect(docs.get('contract')!.text).toContain(quoted);
  });

  it('never answers with a heading restated as a sentence', () => {
    const answer = ask('What is the expected move?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).not.toContain('Volatility and expected move.');
    expect(answer.answer).toContain('six candles');
  });

  it("meets the documentation's words for what the question names", () => {
    expect(ask('How are webhook deliveries signed?').answer).toContain('HMAC-SHA256');
    expect(questionKind('How much does a trade call cost?')).toBe('number');
    expect(questionKind('Which exchanges can I ask for?')).toBe('list');
    expect(questionKind('How do I verify a verdict?')).toBe('steps');
  });

  it('reads "counts as" as the shape of the question, not its topic', () => {
    expect(questionTerms('What score counts as a HOLD?').map((t) => t.term)).toEqual(
      contentTerms('score hold'),
    );
  });

  it('takes a qualified subject ("a BUY call\'s confidence is …") for the definition asked', () => {
    const meaning = new KnowledgeIndex(
      [
        [
          'm',
          'Methodology',
          "A BUY or SELL call's confidence is the fitted probability that its direction beats the fee.",
        ],
        ['f', 'Fields', 'Every answer says what its confidence means.'],
      ].map(([id, title, text]) => ({
        id: id!,
        source_type: 'doc',
        source_url: `${id}.md`,
        title: title!,
        text: text!,
      })),
    );
    const question = 'What does the confidence number mean?';
    const answer = extractiveAnswer(question, meaning.retrieve(expandQuestion(question)), (t) =>
      meaning.weight(t),
    );
    // The definition is the best unit; the other passage's sentence, within reach of it, joins.
    expect(answer.answer).toContain(
      "A BUY or SELL call's confidence is the fitted probability that its direction beats the fee. [",
    );
    expect(answer.citations.map((c) => c.id)).toContain('m');
  });

  it('says it does not know, ungrounded, when the question is mostly about what the corpus never names', () => {
    // "trade" and "call" are known words; "tesla", "shares" and "earnings" are not.
    for (const question of ['Should I trade Tesla shares before earnings?', 'What is the capital of France?'])
      expect(ask(question)).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  /** An index of [id, title, text] rows and the question asked of it, as the chat asks. */
  /** An answerer over passages given as [id, title, text, source type (default readme)]. */
  function askOf(rows: string[][]) {
    const built = new KnowledgeIndex(
      rows.map(([id, title, text, source]) => ({
        id: id!,
        source_type: (source ?? 'readme') as SourceType,
        source_url: `${id}.md`,
        title: title!,
        text: text!,
      })),
    );
    return (question: string) =>
      extractiveAnswer(question, built.retrieve(expandQuestion(question)), (t) => built.weight(t));
  }

  it('reads "what status comes back if …" as asking for the code of the condition', () => {
    const ask = askOf([
      [
        'limits',
        'Using it › Limits',
        'A request must arrive whole within REQUEST_TIMEOUT_MS (30 s) or gets 408. Every status a route answers is listed in the reference.',
      ],
      [
        'openapi',
        'API reference',
        'The reference lists every status a route answers with its body and headers.',
      ],
    ]);
    // The main clause names only the reply: the condition carries the question, and "status" is
    // met by the code the unit states.
    expect(
      questionTerms('What status do I get if my request takes too long to arrive?').map((t) => t.share),
    ).toEqual([1, 1, 1]);
    expect(ask('What status do I get if my request takes too long to arrive?').answer).toContain('gets 408');
  });

  it('answers a "which" question with the unit enumerating what it asks for, though that unit carries less of its words', () => {
    const ask = askOf([
      [
        'roles',
        'Service › Roles',
        'The dispatcher does webhook matching, signing, delivery and retries. Every role serves GET /healthz and GET /metrics (Prometheus).',
      ],
      [
        'metrics',
        'Webhooks › Observability',
        'On GET /metrics: webhook_delivery_attempts_total{trigger}, webhook_delivery_outcomes_total{outcome}, webhook_delivery_latency_seconds. The dispatcher role exposes them to Prometheus, one series per subscription and outcome.',
      ],
      ['keys', 'Service › Keys', 'A key is sent as a Bearer token on every request.'],
    ]);
    expect(ask('Which Prometheus metrics does the dispatcher expose about deliveries?').answer).toContain(
      'webhook_delivery_latency_seconds',
    );
  });

  it.each([
    [
      'the documented step a "how do I" asks for',
      'Enable a disabled subscription, optionally re-delivering what it missed since a time.',
      [
        'webhooks#recovery',
        'Webhooks › Recovery',
        'Recovery. A disabled subscription enabled with RECOVER_SINCE=T in the request is re-delivered the events it missed since T, from the event log, in the order they were recorded.',
        'webhooks',
      ],
      'RECOVER_SINCE=T',
    ],
    [
      "the documentation's line for the same route",
      'Re-enable a disabled subscription, optionally re-delivering what it missed since a time.',
      [
        'webhooks#routes',
        'Webhooks',
        'route POST /api/webhooks/:id/enable {"recover_since": ISO}; re-enable a subscription; deliver everything since then.',
        'webhooks',
      ],
      'recover_since',
    ],
  ])("adds to a route's summary from the contract %s", (_, summary, documented, expected) => {
    const ask = askOf([
      [
        'contract#routes-webhooks',
        'HTTP routes: webhooks',
        `POST /api/webhooks/{id}/enable: ${summary}`,
        'contract',
      ],
      documented,
      [
        'readme#keys',
        'Keys',
        'A key is sent as a Bearer token on every request; a subscription belongs to one key.',
      ],
    ]);
    const answer = ask('How do I enable a disabled subscription and get what it missed?');
    expect(answer.answer).toContain('POST /api/webhooks/{id}/enable');
    expect(answer.answer).toContain(expected);
  });

  it('reads measures a table cell lists ("1h 4h 1d") as the values of its column', () => {
    const ask = askOf([
      [
        'contract',
        'Tool get_trade_call: answer fields',
        'Answer fields: timeframe (one of 1m, 5m, 15m, 1h, 4h, 1d, required); exchange (one of BINANCE perpetual, BYBIT spot, required).',
      ],
      [
        'venues',
        'Market data › Venues',
        'venue BINANCE (perpetual); coins BTC and ETH, 1h from 2024-12-31; timeframes 1h 4h 1d only: the perpetual files are 1h.',
      ],
    ]);
    expect(ask('Which timeframes can I get for the perpetual?').answer).toContain('timeframes 1h 4h 1d only');
  });

  it('meets a question word the documentation never uses with its word of the same root ("refused": "refusal")', () => {
    const ask = askOf([
      [
        'errors',
        'Using it › Errors',
        'A body nested deeper than 64 levels meets a refusal: 400 JSON_TOO_DEEP.',
      ],
      ['timeout', 'Using it › Timeouts', 'A request must arrive whole within 30 s or gets 408.'],
      ['keys', 'Using it › Keys', 'A key is sent as a Bearer token on every request.'],
    ]);
    // Without the roots, "deeply" and "refused" are words the corpus never uses: most of the question.
    expect(ask('Is a deeply nested body refused?').answer).toContain('JSON_TOO_DEEP');
  });

  it('answers "how do I connect" only with a unit that names the act, not with one that shares the nouns', () => {
    const cards = [
      ['cards', 'HTTP routes: discovery', 'GET /mcp/server-card: MCP Server Card; public, no key.'],
      ['tables', 'Other', 'The server keeps tables. Tables list rows.'],
    ];
    // The only units share "MCP" and "server" but say nothing about connecting: no grounded quote.
    expect(askOf(cards)('How do I connect to the MCP server?')).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
    const withSessions = askOf([
      ...cards,
      ['mcp', 'Service › MCP', 'POST /mcp over Streamable HTTP, sessions via Mcp-Session-Id.'],
    ]);
    const answer = withSessions('How do I connect to the MCP server?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('Mcp-Session-Id');
    expect(answer.answer).not.toContain('Server Card');
  });

  it('reads "past" before a noun as "earlier", not as "beyond" (its sense before a limit)', () => {
    const ask = askOf([
      [
        'busy',
        'Webhooks › Deliveries › A busy endpoint',
        'QUEUE_LIMIT (1000) deliveries per endpoint wait in memory; beyond that they wait by id only.',
      ],
      [
        'log',
        'Webhooks › Deliveries › Retention',
        'The log behind GET /api/webhooks/:id/deliveries keeps the newest 200 deliveries per subscription.',
      ],
      ['track', 'Track record', 'The page shows the hit rates of the past week.'],
      ['verdicts', 'Verdicts', 'A verdict names its coin and timeframe.'],
    ]);
    const answer = ask('How can I see the past deliveries of my webhook?');
    expect(answer.answer).toContain('/deliveries');
    expect(answer.answer).not.toContain('beyond that');
    const meets = (question: string) => questionTerms(question).find((t) => t.term === 'past')!.meets;
    expect([...meets('How can I see the past deliveries?')]).toEqual(['past']);
    expect(meets('What happens past the limit?').has('beyond')).toBe(true);
  });

  it('reads "shown" in "where is X shown" as the shape of the question, as it reads "see"', () => {
    const ask = askOf([
      ['page', 'HTTP routes: history', 'GET /track-record: The track-record page (charts); public, no key.'],
      ['secret', 'Webhooks', 'The signing secret is shown once, when the web hook is created.'],
      ['docs', 'API reference', 'The reference page GET /docs renders the OpenAPI document.'],
      ['record', 'Methodology', 'Every verdict is kept in a record of its market.'],
    ]);
    const answer = ask('Where is the track record shown as a web page?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('GET /track-record');
    expect(questionTerms('Where is the track record shown?').map((t) => t.term)).toEqual(
      contentTerms('track record'),
    );
  });

  it('answers "which X" with the list of X where one exists, not with prose that counts them', () => {
    const title = 'Service › Market data: what the default replay serves';
    const ask = askOf([
      [
        'prose',
        title,
        'The replay reads the full set (Binance spot and USDT-M candles, Binance, Bybit and Hyperliquid funding), and otherwise the shipped slice of six coins.',
      ],
      [
        'spot',
        title,
        'venue BINANCE_SPOT; full set 23 coins: BTC ETH SOL BNB XRP DOGE ADA; shipped slice the first six.',
      ],
      // Counts of coins are not coins.
      [
        'funding',
        title,
        'venue BYBIT funding; full set 30, 28 and 18 coins; shipped slice the same six on each.',
      ],
      ['hooks', 'Webhooks', 'An allowed webhook URL uses HTTPS on port 443 and a global unicast address.'],
      // A list after "for" is its object; "a receiver example" is one item, not what the list names.
      [
        'reg',
        'Using it',
        'POST /api/webhooks registers a URL for trade_call, regime_shift and scan_digest events.',
      ],
      [
        'more',
        'Using it',
        'The delivery log, resend, rotation, metrics and a receiver example are in the webhook guide.',
      ],
    ]);
    expect(ask('Which coins does the shipped replay serve?').answer).toContain('BTC ETH SOL');
    const urls = ask('Which webhook URLs are allowed?').answer;
    expect(urls).toContain('443');
  });

  it('takes only a list of the noun a "which" question asks for as its answer', () => {
    const ask = askOf([
      [
        'deliveries',
        'Webhooks › Deliveries',
        'A payload is sent with the header X-Event, plus Standard Webhooks webhook-id, webhook-timestamp, webhook-signature.',
      ],
      [
        'versions',
        'Webhooks › Versions',
        'A new payload version is added beside the old ones; version 1 is the current webhook payload version.',
      ],
    ]);
    const answer = ask('Which webhook payload versions exist?');
    expect(answer.answer).toContain('version 1');
    expect(answer.answer).not.toContain('webhook-id');
  });

  it('does not take an act named for a narrower case ("hosts that connect only through OAuth") for the act asked', () => {
    const ask = askOf([
      [
        'oauth',
        'Service › Using it › Sign in (OAuth)',
        'Hosts that connect only through OAuth use POST /mcp/signin: the same MCP server as /mcp, for a caller holding a token.',
      ],
      ['mcp', 'Service › Using it › MCP', 'POST /mcp over Streamable HTTP, sessions via Mcp-Session-Id.'],
      ['cards', 'HTTP routes: discovery', 'GET /mcp/server-card: MCP Server Card; public, no key.'],
    ]);
    const answer = ask('How do I connect to the MCP server?');
    expect(answer.answer).toContain('Mcp-Session-Id');
    expect(answer.answer).not.toContain('/mcp/signin');
  });

  it('takes the narrower case when the question narrows the act the same way ("when it only signs in")', () => {
    const ask = askOf([
      [
        'oauth',
        'Service › Using it › Sign in (OAuth)',
        'Hosts that connect only through OAuth (Claude) use POST /mcp/signin: the same MCP server as /mcp, for a caller holding a token.',
      ],
      ['mcp', 'Service › Using it › MCP', 'POST /mcp over Streamable HTTP, sessions via Mcp-Session-Id.'],
    ]);
    expect(ask('How do I connect Claude when it only signs in with OAuth?').answer).toContain('/mcp/signin');
  });

  it("reads contractions as the shape of a question and a phrasal verb as the documentation's verb", () => {
    expect(questionTerms("Why didn't my webhook fire? It isn’t on").map(({ term }) => term)).toEqual([
      'webhook',
      'fire',
    ]);
    const answer = askOf([
      [
        'notice',
        'Webhooks › Disabled notice',
        'A subscription_disabled event notifies the owner when a webhook subscription is disabled.',
      ],
      [
        'rotate',
        'Webhooks › Secrets',
        'POST /api/webhooks/:id/rotate-secret rotates the secret of a webhook.',
      ],
    ])('How do I get told when my webhook gets switched off?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('subscription_disabled');
  });

  it("reads every pronoun's contraction as a stop word, those in 's too (let's, here's, she's)", () => {
    expect(contentTerms("Let's say we'd start on the free tier; here's the key she’s got")).toEqual(
      contentTerms('say start free tier key'),
    );
  });

  it('answers "what is X" with a sentence whose subject is X, and not with one that only names X', () => {
    const rows = (qlike: string) => [
      ['risk', 'Risk model', qlike],
      ['report', 'Evaluation report', 'The report quotes every model.'],
      ['answers', 'Answers', 'The service keeps every answer.'],
    ];
    const question = 'What is QLIKE, the score the report keeps quoting?';
    const defined = askOf(
      rows('QLIKE is r²/h + log h, where r is the realised move and h the forecast variance.'),
    )(question);
    expect(defined.grounded).toBe(true);
    expect(defined.answer).toContain('QLIKE is r²/h + log h');
    // Named, not defined: no sentence carries the question.
    expect(askOf(rows('The fit minimises QLIKE over the training months.'))(question)).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
  });

  it('answers "how do I" with a unit that states the step (a setting) though it words the act otherwise', () => {
    const answer = askOf([
      [
        'examples',
        'API reference › Examples',
        'With RECORD_OPENAPI_EXAMPLES=1 the conformance test writes the example answers to the API document.',
      ],
      ['keys', 'API keys', 'POST /api/keys creates a key; the answer carries it once.'],
    ])('How do I refresh the example answers in the API document?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('RECORD_OPENAPI_EXAMPLES=1');
  });

  it('reads "which" with a singular noun as asking for one thing, with a plural one as asking for a list', () => {
    expect(questionKind('Which header carries the new signature during a rotation?')).not.toBe('list');
    expect(questionKind('Which file holds the carry model?')).not.toBe('list');
    expect(questionKind('Which webhook events can I subscribe to?')).toBe('list');
    expect(questionKind('Which packages are allowed to run install scripts?')).toBe('list');
  });

  it("meets a buyer's word with the documentation's (cancel → revoke, log in → sign in)", () => {
    const ask = askOf([
      ['keys', 'API keys', 'npm run keys -- revoke <keyId> revokes a key at once.'],
      ['signin', 'Sign-in', 'A wallet gets its key by signing in: GET /api/keys/nonce, then POST /api/keys.'],
      ['plans', 'Plans', 'The pro plan allows 100,000 calls a month.'],
    ]);
    expect(ask('How do I cancel a key?').answer).toContain('revoke <keyId>');
    expect(ask('How do I log in with my wallet?').answer).toContain('GET /api/keys/nonce');
    expect(questionTerms('What happens if I send too many requests?').map(({ term }) => term)).toEqual([
      'send',
      'rate',
      'limit',
    ]);
  });

  it('meets a word in a compound the documentation writes as one ("Dockerfile" for "docker")', () => {
    const answer = askOf([
      [
        'image',
        'Node › Image',
        "The build's base image (deploy/Dockerfile) starts from node:24-bookworm-slim.",
      ],
      ['roles', 'Running › Roles', 'npm start runs every role; docker compose runs them in containers.'],
    ])('Which base image does the Docker build start from?');
    expect(answer.answer).toContain('bookworm-slim');
  });

  it('answers "when does X count as Y" with the rule, even from a long sentence read from its colon', () => {
    const question = 'When does a call count as a hit?';
    expect(questionKind(question)).toBe('condition');
    const rule =
      'forward return at 1, 6 and 24 candles, hit / miss after the 10 bps fee at 6 candles (no-call for HOLD), net return, MAE/MFE over the six candles, realised volatility.';
    const long = `Once 24 candles have closed, the resolver labels each verdict from the same feed's candles as an outcome event in a stream of its own, named after the verdict, carrying the verdict's hash so that anyone can match them, and recorded once per verdict, whatever the number of replicas that try: ${rule}`;
    expect(long.length).toBeGreaterThan(450);
    const answer = askOf([
      ['track', 'Track record', 'GET /api/track-record: hit rates per venue and timeframe of the calls.'],
      ['history', 'Verdict history', long],
    ])(question);
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain(`${rule} [`);
    expect(answer.citations.flatMap((c) => c.quote.split(' … '))).toContain(rule);
  });

  it('meets "contain" in "covered", and reads camelCase names by their parts', () => {
    const answer = askOf([
      [
        'table',
        'Evaluation › Risk',
        'set perp; tf 4h; horizon next; points 5478; closes in the band 81.1%; free band coverage 79.9%.',
      ],
      [
        'prose',
        'Methodology › Risk forecast',
        'Out of sample its band covered the close 78.7–84.7 % of the time on every timeframe.',
      ],
    ])('How often does the band contain the close?');
    expect(answer.answer).toContain('78.7–84.7 %');
    const verify = askOf([
      [
        'rotation',
        'Webhooks › Secret rotation',
        "verifyWebhook and standardwebhooks accept either secret's signature.",
      ],
      ['sample', 'Webhooks › Test', 'A signed sample is sent to the receiver.'],
      ['verdicts', 'Verify a verdict', 'Anyone can verify a verdict at /verify.'],
    ])('How do I verify a webhook signature?');
    expect(verify.answer).toContain('verifyWebhook');
  });

  it('answers "how many" with a unit that states the number, and does not know when none does', () => {
    const shipped = [
      'sample',
      'Service › Market data › The shipped slice',
      'The shipped slice holds the coins most asked for, as the sample data of the replay.',
    ];
    // Only prose around the coins: no number, so no grounded answer to "how many".
    expect(askOf([shipped])('How many coins does the shipped sample data hold?')).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
    const answer = askOf([
      shipped,
      ['rows', 'Service › Market data', 'The sample data holds the same rows for six coins and six weeks.'],
    ])('How many coins does the shipped sample data hold?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('six coins');
    expect(answer.answer).not.toContain('most asked for');
  });

  it('answers "how long" with a length of time and "how many X" with a count of X, not with the nearest number', () => {
    const ask = askOf([
      [
        'rates',
        'Service › History route › Requests',
        'The history route answers 120 requests a minute per key, and every request that holds it open counts once.',
      ],
      [
        'poll',
        'Service › Long poll',
        'A long poll of the history route stays open up to 30 s when nothing is new.',
      ],
      [
        'gate',
        'Methodology › Cells',
        'A cell emits BUY or SELL only where its calls beat random calls and the 10 bps fee on every fold of 2022.',
      ],
      [
        'summary',
        'Evaluation › Summary',
        'Direction only where it pays: 0 of 15 cells emit BUY or SELL today.',
      ],
    ]);
    // "120, free keys 300": the number before a comma counts no keys.
    const free = askOf([
      [
        'rates',
        'Service › Using it › Request-rate limits',
        'Every route takes one request per window: anonymous callers by client address 120, free keys 300, pro 6,000.',
      ],
      [
        'free',
        'Service › Using it › API keys',
        'Free keys are budgeted per client network: at most FREE_KEYS_PER_ADDRESS_PER_DAY (3) a UTC day per IPv4 address.',
      ],
    ])('How many free keys can one IPv4 address get in a UTC day?');
    expect(free.answer).toContain('FREE_KEYS_PER_ADDRESS_PER_DAY (3)');
    // "What is the retry schedule": a quantity of time is asked, though not by "how long".
    const schedule = askOf([
      [
        'overview',
        'Service › Using it › Webhooks',
        'Failed webhook deliveries are signed again and retried on a Svix-like schedule, with a circuit breaker.',
      ],
      [
        'retries',
        'Webhooks › Deliveries › Retries',
        'Only 2xx is success. Retries follow WEBHOOK_RETRY_SCHEDULE (immediately, 5 s, 5 min, 30 min).',
      ],
    ])('What is the retry schedule for failed webhook deliveries?');
    expect(schedule.answer).toContain('5 s, 5 min, 30 min');
    const poll = ask('How long will the history route hold my request open when nothing is new?');
    expect(poll.grounded).toBe(true);
    expect(poll.answer).toContain('up to 30 s');
    expect(poll.answer).not.toContain('120 requests a minute');
    for (const question of [
      'How many of the cells are allowed to emit BUY or SELL?',
      'Out of all the cells, how many emit BUY or SELL?',
    ]) {
      const cells = ask(question);
      expect(cells.grounded, question).toBe(true);
      expect(cells.answer, question).toContain('0 of 15 cells');
    }
  });

  it('answers "how do I" with the step named after what the question names, though the question words the rest otherwise', () => {
    const ask = askOf([
      [
        'roles',
        'Service › Running › Roles',
        'Roles: npm start runs them all; npm start -- --role api runs only the api role, the HTTP app.',
      ],
      [
        'keys',
        'Service › Using it › API keys',
        'An api key is sent in the Authorization header of every HTTP call.',
      ],
      [
        'front',
        'Service › Running',
        'The HTTP front serves every api route on PORT; start it behind a proxy with TRUST_PROXY=1 to scale it.',
      ],
    ]);
    const answer = ask('We want to scale the HTTP front separately: how do I start just the api role?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('--role api');
    expect(answer.answer).not.toContain('TRUST_PROXY');
  });

  it('does not know a question about a proper name the documentation never uses, nor one asking for a judgement no unit makes', () => {
    const ask = askOf([
      [
        'retries',
        'Webhooks › Deliveries › Retries',
        'A failed webhook delivery is retried on a schedule: at once, after 5 s, 5 min and 30 min.',
      ],
      [
        'stripe-free',
        'Webhooks › Receiver',
        'A receiver verifies the webhook signature before it reads the body.',
      ],
      [
        'timeframes',
        'Service › Timeframes',
        'Trade calls are served for the timeframes 5m, 15m, 1h and 4h of day trading and swing trading alike.',
      ],
    ]);
    expect(ask('What retry schedule does a webhook delivery use?').answer).toContain('5 min');
    // "The best way to …" asks how, as "how do I" does: no judgement is asked of the answer.
    expect(ask("What's the best way to verify a webhook signature?").answer).toContain(
      'verifies the webhook signature',
    );
    for (const question of [
      'What webhook retry schedule does Stripe use?',
      'Which timeframe is best for day trading?',
    ])
      expect(ask(question), question).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  it('does not take a unit naming only where the question is set, its other words met in codes, as an answer', () => {
    const ask = askOf([
      [
        'digest',
        'Webhooks › Digest',
        'A digest lists the calls of the markets BINANCE ranks on the schedule; scan_trade_calls refuses BINANCE_SPOT 2h, a timeframe off the schedule, with the same words.',
      ],
      [
        'fees',
        'Pricing › Fees',
        'Each call is charged its price per call; the fee of the plan is paid monthly.',
      ],
      [
        'hurdle',
        'Methodology › Hurdle',
        'A call beats the fee of 10 bps at the horizon or it is no hit; the fee is taken off each return.',
      ],
      ['candles', 'Replay › Venues', 'BYBIT has funding but no candles in the replay.'],
      [
        'venues',
        'Service › Venues',
        'Spot and perpetual venues are served; a trade call reads either, and trading stays with you.',
      ],
      [
        'plans',
        'Pricing › Plans',
        'Plans differ in their monthly quota and their price; the free plan has no fee.',
      ],
    ]);
    // The place and what is asked of it, both named: answered.
    expect(ask('Does the replay have candles on Bybit?').answer).toContain('funding but no candles');
    expect(ask('What is the maker fee for spot trading on Binance?')).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
  });

  it('does not know how to act on a thing the documentation never names; knows how to act on one it names', () => {
    const ask = askOf([
      [
        'keys',
        'Using it › API keys',
        'A wallet gets one free key by signing in with Ethereum; an operator can revoke a key with npm run keys.',
      ],
      [
        'verify',
        'Using it › Verify',
        'To check that nobody tampered with an exported history, run npm run history -- verify on it.',
      ],
    ]);
    expect(ask('How do I revoke a key?').answer).toContain('revoke a key');
    // What the act is done to ends at a clause ("nobody tampered …"), not at its last word.
    expect(ask('How do I check nobody tampered with the history?').answer).toContain('history -- verify');
    for (const question of [
      'How do I revoke token approvals in my Ethereum wallet?',
      'How can I revoke the approvals of my wallet?',
    ])
      expect(ask(question), question).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  it('answers a question naming an unknown tool only in a trailing "in Python" / "with Express", and not one about an unknown name', () => {
    const ask = askOf([
      [
        'verify',
        'Webhooks › Receiver',
        'To verify a webhook signature, compute the HMAC-SHA256 of the timestamp and the raw body keyed with the secret, and compare it with the signature header.',
      ],
      [
        'rotate',
        'Webhooks › Secrets',
        'POST /api/webhooks/:id/rotate-secret gives the webhook a new secret; the old secret stays valid for 24 h.',
      ],
      ['prices', 'Service › Prices', 'A trade call costs 0.02 USD, and webhooks cost nothing.'],
      [
        'deploy',
        'Service › Running',
        'Deploy the image with docker run, and set PORT to choose the port it listens on.',
      ],
      ['api', 'Service › HTTP API', 'The HTTP API answers JSON on every route under /api.'],
      [
        'history',
        'Service › Verdicts',
        'The verdict history is kept in the event log, and every verdict is revealed after six candles.',
      ],
      ['export', 'Service › Keys', 'An export of the keys is written by npm run keys.'],
    ]);
    for (const question of [
      'How do I verify the webhook signature in Python?',
      'How do I verify the webhook signature with Express?',
      'How do I verify webhook signatures using Flask?',
    ])
      expect(ask(question).answer, question).toContain('HMAC-SHA256');
    expect(ask('How do I rotate the webhook secret with Django?').answer).toContain('rotate-secret');
    // "Go" is a stop word: it never counted as a name the documentation does not use.
    expect(ask('How do I call the API from Go?').grounded).toBe(true);
    for (const question of [
      "What are Stripe's fees?",
      'Does CoinGecko have an API?',
      'How do I deploy to Heroku?',
      'How do I verify a Stripe webhook signature?',
      // "From" names whose the thing is as often as the tool it is reached from.
      'How do I verify a webhook signature from Stripe?',
      // The name of the tool is trailing; the one before it is what the question is about.
      'How do I verify the Stripe signature in Python?',
      // The rest of the question is not the documentation's, or not carried by one unit well.
      'How do I write a loop in Python?',
      'Where is the verdict history export in Python?',
    ])
      expect(ask(question), question).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  it('refuses a name the documentation uses where the act is done, what it acts on or whose product is asked, when the passage never names it; a forecast no quote makes; holding a position', () => {
    const ask = askOf([
      [
        'stops',
        'Methodology › Sizing',
        'A sized trade call sets the stop loss of a long at band_low and the stop loss of a short at band_high.',
      ],
      ['venues', 'Service › Venues', 'Funding rates are read from Binance, Bybit and Hyperliquid.'],
      [
        'install',
        'Service › Running',
        'Install the service with npm run setup; on Windows, setup uses the system Node when it is 24.',
      ],
      ['cache', 'Service › Cache', 'The quota counters live in Redis when CACHE=redis is set.'],
      [
        'limits',
        'Service › Rate limits',
        'The HTTP API holds each pro key to a request rate limit of 6,000 a minute.',
      ],
      [
        'coins',
        'Evaluation › Months',
        'The better of the two forecasts for each coin is scored again next month, on the months after training.',
      ],
      [
        'hold',
        'Methodology › Verdicts',
        'A HOLD takes no position, and a position is never held past the six candles its outcome is scored on before profit is counted.',
      ],
    ]);
    expect(ask('Where does a sized trade call set the stop loss of a long?').answer).toContain('band_low');
    expect(ask('What does setup use on Windows?').answer).toContain('system Node');
    expect(ask('What is the rate limit of a pro key?').answer).toContain('6,000');
    expect(ask('Which venues are funding rates read from?').answer).toContain('Bybit');
    for (const question of [
      // Where the act is done, named after "on": this service's stops are not Bybit's.
      'How do I set a stop loss on Bybit?',
      // What a "how do I" acts on: the passage on installing never names Redis.
      'How do I install Redis on Windows?',
      // Whose product: the rate limit quoted is this service's, not the Binance API's.
      'What rate limit does the Binance API have?',
      // A forecast, answered by a unit that judges ("the better of the two") but forecasts nothing.
      'Which coins will go up the most next month?',
      // "Hold" in lower case is the trader's verb; "before" opens a condition.
      'How long should I hold a position before taking profit?',
    ])
      expect(ask(question), question).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  it('takes a setting named after the time asked for ("WEBHOOK_TIMEOUT_MS") for its value, not a farther sentence stating some other duration', () => {
    const ask = askOf([
      [
        'timeout',
        'Webhooks › Deliveries › A busy endpoint',
        'A webhook delivery that gets no complete answer within WEBHOOK_TIMEOUT_MS is a failed attempt, and the endpoint holds its slot until then.',
      ],
      [
        'breaker',
        'Webhooks › Deliveries › Circuit breaker',
        'One probe goes out after each delay of the retry schedule (5 s, 5 min, 30 min); another timeout opens the breaker again.',
      ],
      [
        'tolerance',
        'Webhooks › Receiver',
        'A receiver refuses a webhook signature whose timestamp is more than 300 s away from its clock: that is its tolerance.',
      ],
      [
        'chat',
        'Service › Chat',
        'An answer from a chat provider that errs or exceeds CHAT_TIMEOUT_MS is replaced by the extractive one.',
      ],
      ['retry', 'Service › Chat › Provider', 'A chat provider that was down is asked again after 5 min.'],
    ]);
    for (const question of [
      'What is the timeout of a webhook delivery?',
      'What is the webhook delivery timeout?',
    ]) {
      const answer = ask(question);
      expect(answer.answer, question).toContain('WEBHOOK_TIMEOUT_MS');
      expect(answer.answer, question).not.toContain('5 s, 5 min');
    }
    const chat = ask('What is the timeout of the chat provider?');
    expect(chat.answer).toContain('CHAT_TIMEOUT_MS');
    expect(chat.answer).not.toContain('5 min');
    // Where no unit names a setting for it, the written-out duration still answers.
    expect(ask('What is the retry schedule?').answer).toContain('5 s, 5 min, 30 min');
    expect(ask('What is the signature tolerance?').answer).toContain('300 s');
  });

  it('reads a word the documentation never uses as written as unused, though one of its letters\' roots is used ("founder", "found")', () => {
    const ask = askOf([
      [
        'keys',
        'HTTP routes: keys',
        'GET /api/keys/nonce: A single-use nonce for Sign-In with Ethereum; public, no key.',
      ],
      [
        'mcp',
        'Service › Using it › MCP',
        'A session held by a process since restarted answers 404 with -32001 Session not found.',
      ],
      ['prices', 'Service › Prices', 'A trade call costs 0.02 USD per call.'],
    ]);
    expect(ask('Who is the founder of Ethereum?')).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
  });

  it('answers "how do I" with the unit that states the step, not with a neighbour that shares its nouns', () => {
    const answer = askOf([
      [
        'about',
        'Webhooks › Disabled subscriptions',
        'To re-enable a disabled webhook subscription, first fix the receiver that made it fail; nothing is lost while it is disabled.',
      ],
      ['enable', 'Webhooks › Routes', 'POST /api/webhooks/:id/enable re-enables it.'],
    ])('How do I re-enable a disabled webhook subscription?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('POST /api/webhooks/:id/enable');
    expect(answer.answer).not.toContain('first fix the receiver');
  });

  it('answers "why" with the sentence that states the cause, not with an argument list', () => {
    expect(questionKind('Why is every answer a HOLD?')).toBe('reason');
    const answer = askOf([
      [
        'args',
        'Tool get_trade_call: arguments',
        'A HOLD answer carries lean, timing_skill, expected_net_bps, expected_net_bps_low and expected_net_bps_high.',
      ],
      [
        'gate',
        'The signals',
        'Every answer is a HOLD because no cell beats the 10 bps fee on the evidence of its folds.',
      ],
    ])('Why is every answer a HOLD?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer.startsWith('Every answer is a HOLD because')).toBe(true);
    expect(answer.answer).not.toContain('timing_skill');
  });

  it('cuts a long sentence into clauses only outside brackets, so no quote opens a parenthesis it does not close', () => {
    const filler = 'and the rest of the flow goes on as it always does, one step after another, '.repeat(5);
    const long = `The payment is verified, the payer's exposure checked (balance minus pending payments must cover the call; with Redis that sum is shared by every replica); then ${filler}the call is served; a failed call charges nothing.`;
    expect(long.length).toBeGreaterThan(450);
    const answer = askOf([['pay', 'Pay per call', long]])('How is the exposure of a payer checked?');
    expect(answer.grounded).toBe(true);
    for (const quote of answer.citations[0]!.quote.split(' … '))
      expect((quote.match(/\(/g) ?? []).length, quote).toBe((quote.match(/\)/g) ?? []).length);
  });

  it('reads "how can I tell whether" as asking for a sign, and meets "answer" in "response"', () => {
    const answer = askOf([
      [
        'start',
        'Service',
        'Run npm start: market data is replayed from files, or taken live from the venues.',
      ],
      ['feed', 'Replayed data says so', 'Every response carries feed: live or replay.'],
    ])('How can I tell whether an answer comes from live or replayed data?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer.startsWith('Every response carries feed')).toBe(true);
  });

  it('answers "why" with the cause when the best sentence only draws the conclusion ("therefore")', () => {
    const answer = askOf([
      [
        'gate',
        'Methodology › Verdicts',
        'A cell emits a call only where its calls beat the fee on every fold. No cell passes today: spot 5m calls earned about −10 bps per call after the fee. Every answer is therefore HOLD, and carries its lean.',
      ],
    ])('Why is every answer a HOLD?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('No cell passes today');
    expect(answer.answer.indexOf('No cell passes')).toBeLessThan(answer.answer.indexOf('therefore HOLD'));
  });

  it('asks for a number on "largest" and "how large", and does not read one in a name (SHA256, x402)', () => {
    expect(questionKind('What is the largest body a route accepts?')).toBe('number');
    expect(questionKind('How large is the payment header?')).toBe('number');
    const ask = askOf([
      ['sig', 'Webhooks', 'Deliveries are signed with HMAC-SHA256 and retried on a schedule of their own.'],
      ['retry', 'Webhooks › Deliveries', 'Retries follow the schedule: immediately, 5 s, 5 min and 30 min.'],
    ]);
    // "retried" is of "retry", as "retries" is; the number is the schedule's, not SHA256's.
    expect(stem('retried')).toBe(stem('retries'));
    expect(ask('How often is a webhook delivery retried?').answer).toContain('5 min');
  });

  it('reads a list whose items carry remarks, a list of short phrases and items on lines of their own', () => {
    expect(
      askOf([
        [
          'stores',
          'Service › Foundations',
          'event store port: in-memory, LMDB (default), PostgreSQL, KurrentDB.',
        ],
        [
          'parquet',
          'Service › Exports',
          'Parquet stores recorded_at, reveal_at and candle_close_time as event timestamps.',
        ],
      ])('Which event stores can the service use?').answer,
    ).toContain('KurrentDB');
    expect(
      askOf([
        [
          'risk',
          'Risk forecast',
          'It answers an 80 % band for the next candle, six candles and one UTC day (horizons[]).',
        ],
        [
          'record',
          'Track record',
          'The risk record scores the share of closes inside the served band over its horizon.',
        ],
      ])('Which horizons does the risk forecast cover?').answer,
    ).toContain('six candles and one UTC day');
    const roles = askOf([
      [
        'roles',
        'Service › Running',
        'Roles: npm start runs them all, as docker-compose.yml does:\napi — the HTTP app.\nengine — verdicts on every candle close.\ndispatcher — webhook delivery and retries.',
      ],
      ['deploy', 'Service › Deployment', 'compose runs NATS, Redis and the four roles on one host each.'],
    ])('Which roles can the service run?').answer;
    for (const role of ['api —', 'engine —', 'dispatcher —']) expect(roles).toContain(role);
    expect(
      askOf([
        [
          'versions',
          'Webhooks › Versions',
          'A new payload version is added beside the old ones. Only version 1 exists today.',
        ],
        [
          'schemas',
          'Webhooks › Schemas',
          'GET /api/webhooks/schemas has one schema per event type and payload version.',
        ],
      ])('Which webhook payload versions exist?').answer,
    ).toContain('Only version 1 exists today.');
  });

  it('quotes a clause too long to quote whole in comma runs rather than dropping it', () => {
    const filler = 'fitted on the training months by minimising QLIKE, one per timeframe, '.repeat(5);
    const long = `get_risk_forecast answers, for every served market and timeframe, the expected move and an 80 % band for the next candle, six candles and one UTC day (horizons[]), from a model ${filler}so the σ is a mean at every horizon`;
    expect(long.length).toBeGreaterThan(450);
    const answer = askOf([['risk', 'Risk forecast', long]])('Which horizons does the risk forecast cover?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('six candles and one UTC day (horizons[])');
    for (const quote of answer.citations[0]!.quote.split(' … ')) expect(long).toContain(quote);
  });

  it('counts a word the documentation never uses against an answer: no grounded quote for an off-topic question', () => {
    const answer = askOf([
      ['ci', 'Intervals', 'A day-block bootstrap resamples days; its statistic sorts every test point.'],
      ['lists', 'Scans', 'A scan returns a list of calls, ranked by confidence.'],
      ['hooks', 'Webhooks', 'Webhooks are signed with HMAC.'],
      ['prices', 'Prices', 'A trade call costs 0.02 USD.'],
    ])('How do I sort a list in Python?');
    expect(answer).toEqual({ answer: DONT_KNOW, citations: [], grounded: false });
  });

  /** Passages that use the service's everyday words (funding, rates, market, queue …) over and over. */
  const everyday = Array.from({ length: 20 }, (_, i) => [
    `other-${i}`,
    `Other ${i}`,
    `The service does thing number ${i} with its funding market rates and queues elsewhere.`,
  ]);

  it('quotes a unit of another passage scoring within 0.15 of the best beside it', () => {
    const answer = askOf([
      [
        'a',
        'Webhooks',
        'Each webhook endpoint keeps a delivery queue of events in memory, in order, while they wait, each with the number and the time at which it was first sent and the subscription that it belongs to, so that a later look shows what is still owed to whom.',
      ],
      [
        'b',
        'Limits',
        'The webhook delivery queue holds its events in memory, in order, while they wait for the receiver.',
      ],
      ...everyday.slice(0, 8),
    ])('How is the webhook delivery queue of each endpoint ordered in memory while events wait?');
    // b's sentence does not name the endpoint and scores about 0.13 below a's: within reach.
    expect(answer.citations.map((c) => c.id)).toEqual(['a', 'b']);
    expect(answer.answer).toContain('while they wait for the receiver. [2]');
  });

  it("does not fall back on a unit naming only the service's everyday words of the question", () => {
    const ask = askOf([
      ['a', 'Indicators › Bull Bear Power', 'Funding rates and the market are read each hour.'],
      ['b', 'Scores', 'A score below zero is negative.'],
      ...everyday,
    ]);
    // The passage covers the question through its title, but its one sentence names neither
    // "negative" nor "bear": no unit carries the question, and the fallback's would not answer it.
    expect(ask('Why do funding rates go negative in a bear market?')).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
  });

  it('falls back on a unit stating the rest of the question when its rare word only shapes it', () => {
    // "sizing", "position" and "stop" stand in several passages each, "put" in one: the rare word
    // is "put", about a third of the question's weight. No unit carries the question (the stops'
    // sentence lacks "sizing"), the Stops passage covers it as a whole, and its unit is the answer.
    const ask = askOf([
      [
        'stops',
        'Stops',
        'Sizing takes a budget stated by the caller in US dollars, one hundred by default, and turns it into a notional for each horizon of the forecast. A position has its stop at band_low.',
      ],
      ['upload', 'Uploads', 'Put the file in the folder.'],
      ...['sizing', 'position', 'stop'].flatMap((word) =>
        Array.from({ length: 7 }, (_, i) => [
          `${word}-${i}`,
          `Other ${word} ${i}`,
          `Thing ${i} has a ${word} elsewhere.`,
        ]),
      ),
      ...everyday.slice(0, 8),
    ]);
    const answer = ask("Where does the sizing put a position's stop?");
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('stop at band_low');
  });

  it('reads basis points as the bps the documentation writes', () => {
    const ask = askOf([
      [
        'gate',
        'The gate',
        'Spot 5m calls earned -10.3 bps per call after the fee, on 74,090 calls over 3 folds.',
      ],
      ['folds', 'Folds', 'The gate reads 3 folds and 1 era of spot calls after the fee.'],
      ...everyday.slice(0, 8),
    ]);
    const answer = ask('How many basis points per call did spot 5m calls lose after the fee?');
    expect(answer.grounded).toBe(true);
    expect(answer.answer).toContain('-10.3 bps per call');
  });

  it('says it does not know below the threshold, citing nothing', () => {
    const question = 'how tall is the eiffel tower in trade terms';
    expect(extractiveAnswer(question, index.retrieve(question))).toEqual({
      answer: DONT_KNOW,
      citations: [],
      grounded: false,
    });
    expect(extractiveAnswer('anything at all', [])).toMatchObject({ grounded: false, citations: [] });
  });

  it('orders ties by id so the same query gives the same results', () => {
    const twins = new KnowledgeIndex([
      { id: 'z', source_type: 'doc', source_url: 'z', title: 'T', text: 'same words here' },
      { id: 'm', source_type: 'doc', source_url: 'm', title: 'T', text: 'same words here' },
    ]);
    expect(twins.search('same words', 5).results.map((r) => r.id)).toEqual(['m', 'z']);
  });
});

describe('chat configuration', () => {
  it('a provider needs a base URL and model names; the defaults serve extractive only', () => {
    expect(loadConfig({})).toMatchObject({ CHAT_PROVIDER: 'none', CHAT_MODELS: [], CHAT_QUOTA_FREE: 10 });
    expect(() => loadConfig({ CHAT_PROVIDER: 'anthropic' })).toThrow(ConfigError);
    expect(() => loadConfig({ CHAT_PROVIDER: 'anthropic' })).toThrow(/CHAT_BASE_URL[\s\S]*CHAT_MODELS/);
    expect(
      loadConfig({
        CHAT_PROVIDER: 'openai-compatible',
        CHAT_BASE_URL: 'http://127.0.0.1:1/v1',
        CHAT_MODELS: 'a, b',
      }).CHAT_MODELS,
    ).toEqual(['a', 'b']);
  });

  it('anthropic without CHAT_API_KEY is refused: its API answers every call without a key 401', () => {
    const anthropic = {
      CHAT_PROVIDER: 'anthropic',
      CHAT_BASE_URL: 'https://api.anthropic.com',
      CHAT_MODELS: 'm',
    };
    for (const key of [{}, { CHAT_API_KEY: ' ' }]) {
      expect(() => loadConfig({ ...anthropic, ...key })).toThrow(
        /CHAT_API_KEY: required when CHAT_PROVIDER=anthropic \(its API refuses every call without a key\)/,
      );
    }
    expect(loadConfig({ ...anthropic, CHAT_API_KEY: 'sk-ant-1' }).CHAT_PROVIDER).toBe('anthropic');
    // A local OpenAI-compatible server (llama.cpp, Ollama) takes calls without a key.
    expect(loadConfig({ ...anthropic, CHAT_PROVIDER: 'openai-compatible' }).CHAT_PROVIDER).toBe(
      'openai-compatible',
    );
  });

  it('model names without a provider are refused: nothing would serve them', () => {
    // Taken, they were offered (the OpenAPI enum, INVALID_MODEL's list) and answered extractively
    // under the name "extractive", without a note.
    expect(() => loadConfig({ CHAT_MODELS: 'gpt-4' })).toThrow(ConfigError);
    expect(() => loadConfig({ CHAT_MODELS: 'gpt-4' })).toThrow(
      /CHAT_MODELS: names models no provider serves with CHAT_PROVIDER=none/,
    );
  });
});

describe('request checks', () => {
  it('bounds apply after trimming', () => {
    expect(checkSearch({ query: '  abc  ' })).toEqual({ ok: true, value: { query: 'abc', limit: 10 } });
    expect(checkSearch({ query: 'ab ' })).toMatchObject({ ok: false, code: 'QUERY_TOO_SHORT' });
    expect(checkSearch(null)).toMatchObject({ ok: false, code: 'INVALID_QUERY' });
    expect(checkSearch({ query: 'abc', limit: 50 })).toMatchObject({ ok: true });
    expect(checkChat({ question: 'hello' }, [])).toEqual({
      ok: true,
      value: { question: 'hello', model: 'extractive' },
    });
    expect(checkChat({ question: 'hello', model: 'm1' }, ['m1'])).toMatchObject({ ok: true });
    expect(checkChat({ question: 'hello', model: 'extractive ' }, [])).toMatchObject({
      code: 'INVALID_MODEL',
    });
  });

  it('count characters as the HTTP bodies and the tools’ JSON Schema do: code points, not UTF-16 units', () => {
    // U+1D465, outside the Basic Multilingual Plane: one character, two UTF-16 units.
    const astral = '\u{1D465}';
    for (const n of [2, 3, 4, 5, 250, 251, 500, 501]) {
      const text = astral.repeat(n);
      const search = checkSearch({ query: text });
      expect(search.ok, `query of ${n}`).toBe(SearchRequest.safeParse({ query: text }).success);
      expect(search.ok, `query of ${n}`).toBe(n >= 3 && n <= 500);
      const chat = checkChat({ question: text }, []);
      expect(chat.ok, `question of ${n}`).toBe(chatRequest([]).safeParse({ question: text }).success);
      expect(chat.ok, `question of ${n}`).toBe(n >= 5 && n <= 500);
    }
  });

  it('a U+FEFF inside the text counts toward no minimum, as the other format characters; letters of every script do', () => {
    // JavaScript's \s holds U+FEFF, so a rule sparing whitespace spared it too: trimmed at the
    // ends only, a stray one inside counted as a character shown.
    const search: [string, boolean][] = [
      ['a\ufeffb', false],
      ['a\ufeff\u200bb', false],
      ['abc', true],
      ['ما؟', true],
      ['日本語', true],
    ];
    for (const [query, ok] of search) {
      expect(checkSearch({ query }).ok, JSON.stringify(query)).toBe(ok);
      expect(SearchRequest.safeParse({ query }).success, JSON.stringify(query)).toBe(ok);
    }
    const chat: [string, boolean][] = [
      ['wh\ufeff\ufeffy', false],
      ['why\ufeff\u00ad\ufeff?', false],
      ['what is squeeze', true],
      ['ما هو الضغط؟', true],
      ['क्या है?', true],
      ['क्\u200dया है', true],
      ['می\u200cشود؟', true],
      ['👨\u200d👩\u200d👧 ما', true],
      ['שלום?', true],
    ];
    for (const [question, ok] of chat) {
      expect(checkChat({ question }, []).ok, JSON.stringify(question)).toBe(ok);
      expect(chatRequest([]).safeParse({ question }).success, JSON.stringify(question)).toBe(ok);
    }
  });

  it('a zero-width non-joiner or joiner between two letters counts, as part of the word; alone it is nothing', () => {
    // Persian "می‌شه" is five characters, the ZWNJ one of them; "چرا؟" is four, refused.
    const cases: [string, boolean | 'INVALID_QUESTION'][] = [
      ['می\u200cشه', true],
      ['कि\u200dया', true],
      ['چرا؟', false],
      ['می\u200c\u200cش', false],
      ['\u200cمیشه\u200c', false],
      ['\u200c\u200d\u200c\u200d\u200c', 'INVALID_QUESTION'],
      ['👨\u200d👩\u200d👧', false],
    ];
    for (const [question, ok] of cases) {
      const checked = checkChat({ question }, []);
      const parsed = chatRequest([]).safeParse({ question });
      expect(checked.ok, JSON.stringify(question)).toBe(ok === true);
      expect(parsed.success, JSON.stringify(question)).toBe(ok === true);
      if (ok === 'INVALID_QUESTION') expect(checked).toMatchObject({ code: 'INVALID_QUESTION' });
      else if (!ok) expect(checked).toMatchObject({ code: 'QUESTION_TOO_SHORT' });
    }
  });

  it('the minimum counts readable characters: combining marks on no letter and variation selectors count for nothing', () => {
    // They show (a mark on a dotted circle), so they are no INVALID_ text; but searchable() hands
    // the search nothing of them, and the minimum counts what the search reads.
    const cases: [string, string, string][] = [
      ['\u0301\u0301\u0301\u0301\u0301', 'QUERY_TOO_SHORT', 'QUESTION_TOO_SHORT'],
      ['a\ufe0f\ufe0f\ufe0f', 'QUERY_TOO_SHORT', 'QUESTION_TOO_SHORT'],
      ['ab\u{e0100}\u{e0101}\ufe0e', 'QUERY_TOO_SHORT', 'QUESTION_TOO_SHORT'],
      [' \u0301\u0301 \u20dd\u20dd\u20dd ', 'QUERY_TOO_SHORT', 'QUESTION_TOO_SHORT'],
      ['why\ufe0f\ufe0f\ufe0f', 'ok', 'QUESTION_TOO_SHORT'],
      // Marks on a letter are part of it: the search reads them in the word.
      ['कि\u200dया', 'ok', 'ok'],
      ['❤\ufe0f BTC', 'ok', 'ok'],
    ];
    for (const [text, search, chat] of cases) {
      const where = JSON.stringify(text);
      const searched = checkSearch({ query: text });
      expect(searched.ok ? 'ok' : searched.code, where).toBe(search);
      expect(SearchRequest.safeParse({ query: text }).success, where).toBe(search === 'ok');
      const asked = checkChat({ question: text }, []);
      expect(asked.ok ? 'ok' : asked.code, where).toBe(chat);
      expect(chatRequest([]).safeParse({ question: text }).success, where).toBe(chat === 'ok');
    }
    // The refusal says what is counted.
    expect(checkChat({ question: '\u0301\u0301\u0301\u0301\u0301' }, [])).toMatchObject({
      message: expect.stringMatching(/shorter than 5 readable characters$/),
    });
    expect(checkSearch({ query: 'a\ufe0f\ufe0f\ufe0f' })).toMatchObject({
      message: expect.stringMatching(/shorter than 3 readable characters$/),
    });
    // The search reads a word with its marks whole, as the minimum counts it.
    expect(words(searchable('कि\u200dया है'))).toEqual(['कि\u200dया', 'है']);
    expect(searchable('a\ufe0f\ufe0f \u0301x')).toBe('a x');
  });

  it('terminal escape sequences count for nothing: alone they are INVALID_, around letters they add none', () => {
    const cases: [string, string, string][] = [
      ['\u001b[31m\u001b[0m', 'INVALID_QUERY', 'INVALID_QUESTION'],
      ['\u001b]0;a title\u0007\u009b2J', 'INVALID_QUERY', 'INVALID_QUESTION'],
      ['\u001b[1;31mab\u001b[0m', 'QUERY_TOO_SHORT', 'QUESTION_TOO_SHORT'],
      ['\u001b[1;31mwhy?\u001b[0m', 'ok', 'QUESTION_TOO_SHORT'],
      ['\u001b[1;31mwhat is it\u001b[0m', 'ok', 'ok'],
    ];
    for (const [text, search, chat] of cases) {
      const where = JSON.stringify(text);
      const searched = checkSearch({ query: text });
      expect(searched.ok ? 'ok' : searched.code, where).toBe(search);
      expect(SearchRequest.safeParse({ query: text }).success, where).toBe(search === 'ok');
      const asked = checkChat({ question: text }, []);
      expect(asked.ok ? 'ok' : asked.code, where).toBe(chat);
      expect(chatRequest([]).safeParse({ question: text }).success, where).toBe(chat === 'ok');
    }
  });

  it('INVALID_QUERY and INVALID_QUESTION say that invisible characters alone are refused, as they are', () => {
    for (const [checked, field] of [
      [checkSearch({ query: '\u200b\ufeff\u200b\ufeff' }), 'query'],
      [checkChat({ question: '\u200b\ufeff\u0000\u00ad\u2060\u200b' }, []), 'question'],
    ] as const) {
      expect(checked.ok).toBe(false);
      expect(checked).toMatchObject({
        message: `${field} is missing, not a string, or all whitespace or invisible`,
      });
    }
  });
});

describe('chat quota on the in-process adapter', () => {
  it('takes exactly what is left under concurrency, gives refunds back, and rebuilds from the log', async () => {
    const cache = new MemoryCache();
    const store = new MemoryEventStore();
    const counters = new QuotaCounters({ store, cache });
    const quota = new ChatQuota({
      cache,
      store,
      limits: { free: 10, starter: 50, pro: 200 },
      ensureCounters: () => counters.ensure(),
    });
    const subject = { id: 'subject-1', kind: 'key' as const, plan: 'free' as const };
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => quota.consume(subject, 'extractive', `r${i}`)),
    );
    expect(results.filter((r) => r.ok)).toHaveLength(10);
    const refused = results.find((r) => !r.ok)!;
    expect(refused).toMatchObject({ ok: false, snapshot: { used: 10, total: 10, remaining: 0 } });
    const taken = results.find((r) => r.ok)! as { month: string };
    expect(await quota.refund(subject, taken.month, 'r0', 'provider_unavailable')).toMatchObject({
      used: 9,
      remaining: 1,
    });
    expect((await quota.consume(subject, 'extractive', 'again')).ok).toBe(true);
    expect((await quota.consume(subject, 'extractive', 'over')).ok).toBe(false);

    const { state } = await foldLog(store, chatQuotaProjection);
    expect(state[chatKey(subject.id, taken.month)]).toBe(10);
    // A fresh cache has no quota generation: the first read rebuilds it, chats included.
    const fresh = new MemoryCache();
    const freshCounters = new QuotaCounters({ store, cache: fresh });
    const rebuilt = new ChatQuota({
      cache: fresh,
      store,
      limits: { free: 10, starter: 50, pro: 200 },
      ensureCounters: () => freshCounters.ensure(),
    });
    expect(await rebuilt.peek(subject)).toMatchObject({ used: 10, remaining: 0 });
    expect((await rebuilt.consume(subject, 'extractive', 'after-rebuild')).ok).toBe(false);
    await counters.stop();
    await freshCounters.stop();
    await cache.close();
    await fresh.close();
  });
});

describe('live track-record facts', () => {
  const DAY = 86_400_000;
  const outcome = (i: number, closeTime: number, result: 'hit' | 'miss' | 'no-call') =>
    newEvent('VerdictOutcomeResolved', {
      exchange: 'BINANCE_SPOT',
      coin: 'BTC',
      timeframe: '5m',
      verdictId: randomUUID(),
      verdictStream: 'verdicts-BINANCE_SPOT-BTC-5m',
      verdictRevision: i,
      verdictHash: 'a'.repeat(64),
      call: result === 'no-call' ? 'HOLD' : 'BUY',
      confidence: 55,
      candleCloseTime: closeTime,
      feed: 'replay',
      price: 100,
      return1: 0,
      return6: 0.01,
      return24: 0,
      result,
      feeBps: 10,
      horizonCandles: 6,
      netCentiBps: result === 'no-call' ? null : 9000,
      maeBps: result === 'no-call' ? null : 5,
      mfeBps: result === 'no-call' ? null : 120,
      realisedVol: 0.01,
    });

  it('quotes the counts through the last complete UTC day, folded from the log like any projection', async () => {
    const store = new MemoryEventStore();
    const day1 = Date.UTC(2025, 9, 20, 12);
    await store.append('o-1', [outcome(0, day1, 'hit'), outcome(1, day1 + 1000, 'miss')]);
    await store.append('o-2', [outcome(2, day1 + 2000, 'no-call')]);
    // Within the first day nothing is quoted yet: the figure would move on every outcome.
    let { state } = await foldLog(store, knowledgeFactsProjection);
    expect(livePassages(state, { configured: [] }).map((p) => p.id)).not.toContain(
      'live#track-record-BINANCE_SPOT:5m',
    );
    await store.append('o-3', [outcome(3, day1 + DAY, 'hit')]);
    ({ state } = await foldLog(store, knowledgeFactsProjection));
    const passage = livePassages(state, { configured: [] }).find(
      (p) => p.id === 'live#track-record-BINANCE_SPOT:5m',
    )!;
    expect(passage.text).toContain(
      'through 2025-10-20 (UTC): 2 BUY/SELL calls, hit rate 50.0% (1 of 2), and 1 HOLD',
    );
    expect(state.trackRecord['BINANCE_SPOT:5m']!.current).toEqual({ calls: 1, hits: 1, holds: 0 });
  });
});
