/**
 * Knowledge search (issue 10). Three figures, each against a baseline measured in the same run:
 *
 * 1. Search through HTTP: `POST /api/search` with a key on a started api role (key resolution,
 *    quota peek, Lua debit on Redis, QuotaDebitsRecorded append, ETag, highlighted excerpts) against the
 *    bare library — minisearch's own `search` on the same corpus with the same options — behind a
 *    bare Fastify route on the same loopback, so both pay the HTTP layer. Target ≥ 0.5. The bare
 *    in-process query rate is printed too, for scale.
 * 2. Index rebuild: the knowledge-facts projection folded from position 0 of a log of verdicts,
 *    the live passages and the whole index built, against reading the same log with a fold that
 *    does nothing (the store's own cost); and the documents' index against a bare minisearch
 *    `addAll` of the same passages.
 * 3. Memory of the index (heap after a forced GC, with and without the index).
 *
 *   npx tsx bench/knowledge.bench.ts [--cache=redis|memory] [--seconds=2] [--events=20000]
 */
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Fastify from 'fastify';
import MiniSearch from 'minisearch';
import { pino } from 'pino';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { newEvent } from '../contracts/events.ts';
import { TIMEFRAMES } from '../contracts/market.ts';
import { foldLog, type Projection } from '../projections/projection.ts';
import { staticCorpus } from '../services/knowledge/corpus.ts';
import { knowledgeFactsProjection, livePassages } from '../services/knowledge/facts.ts';
import type { Passage } from '../services/knowledge/passages.ts';
import { KnowledgeIndex, miniSearchOptions } from '../services/knowledge/search-index.ts';
import { startService } from '../services/service.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { issueServiceKey } from '../test/service-keys.ts';
import { atLeast, recordTarget } from './harness.ts';
import { bestOfRounds, closedLoop, fmtRate, fmtUs, latencies, verdict } from './load-loop.ts';

const QUERIES = [
  'how is confidence computed',
  'what does squeeze mean',
  'price of a 1m trade call',
  'how do I verify a webhook signature',
  'which venues are live',
  'INVALID_MODEL',
  'how much does the pro plan cost',
  'webhook retry schedule',
  'walk-forward evaluation method',
  'how are funding rates normalised across venues',
];

setFlagsFromString('--expose_gc');
const gc = runInNewContext('gc') as () => void;

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

function time<T>(fn: () => T): { value: T; ms: number } {
  const t0 = performance.now();
  const value = fn();
  return { value, ms: performance.now() - t0 };
}

async function searchThroughHttp(options: { cache: 'redis' | 'memory'; seconds: number }, corpus: Passage[]) {
  const prefix = `bench:knowledge:${randomUUID()}:`;
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    EVENT_STORE: 'memory',
    CACHE: options.cache,
    REDIS_PREFIX: prefix,
    FEED: 'replay',
    HOST: '127.0.0.1',
    PORT: '0',
    METRICS_ENABLED: 'false',
    PLAN_PRO_MONTHLY_CALLS: '100000000',
    // The rate limiter stays in the path (its cost is part of the route's), but never refuses.
    RATE_LIMIT_PRO: '100000000',
    RATE_LIMIT_TOOL_SHARE: '1',
  });
  const service = await startService(config, ['api'], pino({ level: 'silent' }));
  const bare = Fastify({ logger: false });
  const index = new MiniSearch<Passage>(miniSearchOptions());
  index.addAll(corpus);
  bare.post('/search', async (request) => {
    const { query, limit } = request.body as { query: string; limit: number };
    const hits = index.search(query);
    return { query, total_results: hits.length, results: hits.slice(0, limit) };
  });
  const bareUrl = await bare.listen({ host: '127.0.0.1', port: 0 });
  try {
    const issued = await issueServiceKey(service, { plan: 'pro', owner: 'bench' });
    // unique: a term no passage holds is added to every question, so no answer repeats and
    // each side runs the full query; both sides get the same questions in the same order.
    const call = (url: string, headers: Record<string, string>, unique: boolean) => {
      let i = 0;
      return async () => {
        const n = i++;
        const query = `${QUERIES[n % QUERIES.length]!}${unique ? ` n${n}x` : ''}`;
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ query, limit: 10 }),
        });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
      };
    };
    const concurrency = 16;
    const ms = options.seconds * 1000;
    const measure = async (unique: boolean) => {
      const ours = call(`${service.url}/api/search`, { authorization: `Bearer ${issued.key}` }, unique);
      const theirs = call(`${bareUrl}/search`, {}, unique);
      await closedLoop(concurrency, 500, ours);
      await closedLoop(concurrency, 500, theirs);
      const [http, bareRun] = await bestOfRounds(3, [
        () => closedLoop(concurrency, ms, ours),
        () => closedLoop(concurrency, ms, theirs),
      ]);
      const p50 = { ours: await latencies(400, ours), bare: await latencies(400, theirs) };
      return { http: http!, bare: bareRun!, p50 };
    };
    const repeating = await measure(false);
    const unique = await measure(true);
    let q = 0;
    const inProcess = await closedLoop(1, 1000, async () => index.search(QUERIES[q++ % QUERIES.length]!));
    return { repeating, unique, inProcess };
  } finally {
    await bare.close();
    await service.stop();
    if (options.cache === 'redis') await wipePrefix(prefix);
  }
}

async function rebuild(events: number, corpus: Passage[], config: ReturnType<typeof loadConfig>) {
  const store = new MemoryEventStore();
  const coins = Array.from({ length: 40 }, (_, i) => `C${i}`);
  const regimes = ['trending-up', 'trending-down', 'ranging', 'volatile', 'squeeze'] as const;
  const batch: ReturnType<typeof newEvent>[] = [];
  for (let i = 0; i < events; i++) {
    batch.push(
      newEvent('VerdictRecorded', {
        exchange: 'BINANCE',
        coin: coins[i % coins.length]!,
        timeframe: TIMEFRAMES[i % 3 === 0 ? 5 : i % 3 === 1 ? 3 : 7]!,
        call: 'BUY',
        confidence: 55,
        score: 0.3,
        regime: regimes[Math.floor(i / 97) % regimes.length]!,
        price: 100 + (i % 50),
        candleCloseTime: 1_700_000_000_000 + i * 60_000,
        feed: 'replay',
        engineVersion: 'signals-2',
        inputs: {},
        hash: 'a'.repeat(64),
        prevHash: null,
        trigger: 'schedule',
      }),
    );
    if (batch.length === 500) await store.append(`bench-${i}`, batch.splice(0));
  }
  if (batch.length > 0) await store.append('bench-last', batch);
  const noop: Projection<number> = { name: 'noop', version: 1, initial: () => 0, evolve: (n) => n + 1 };
  const best = async <T>(fn: () => Promise<T>) => {
    let ms = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      await fn();
      ms = Math.min(ms, performance.now() - t0);
    }
    return ms;
  };
  const readOnly = await best(() => foldLog(store, noop));
  const full = await best(async () => {
    const { state } = await foldLog(store, knowledgeFactsProjection);
    const index = new KnowledgeIndex([
      ...corpus,
      ...livePassages(state, { configured: config.LIVE_EXCHANGES }),
    ]);
    return index.size;
  });
  let docsMs = Number.POSITIVE_INFINITY;
  let bareMs = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 5; i++) {
    docsMs = Math.min(docsMs, time(() => new KnowledgeIndex(corpus)).ms);
    bareMs = Math.min(
      bareMs,
      time(() => {
        const index = new MiniSearch<Passage>(miniSearchOptions());
        index.addAll(corpus);
        return index;
      }).ms,
    );
  }
  return { readOnly, full, docsMs, bareMs };
}

export async function run(argv: string[] = []): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      cache: { type: 'string', default: 'redis' },
      seconds: { type: 'string', default: '2' },
      events: { type: 'string', default: '20000' },
    },
    allowPositionals: true,
  });
  const config = loadConfig({});
  const corpus = await staticCorpus(config);
  const chars = corpus.reduce((n, p) => n + p.text.length, 0);
  console.log(`corpus: ${corpus.length} passages, ${(chars / 1024).toFixed(0)} KiB of text`);

  const search = await searchThroughHttp(
    { cache: values.cache === 'memory' ? 'memory' : 'redis', seconds: Number(values.seconds) },
    corpus,
  );
  for (const [name, side] of [
    ['10 repeating questions (answers cached per corpus version)', search.repeating],
    ['every question new (no answer cached)', search.unique],
  ] as const) {
    const ratio = side.http.perSec / side.bare.perSec;
    console.log(`search, cache=${values.cache}, 16 concurrent clients, limit 10, ${name}:`);
    console.log(
      `  POST /api/search (key, quota, ETag, excerpts)  ${fmtRate(side.http.perSec)}  p50 ${fmtUs(side.p50.ours.p50Us)}  p99 ${fmtUs(side.p50.ours.p99Us)}`,
    );
    console.log(
      `  bare minisearch query behind a bare route       ${fmtRate(side.bare.perSec)}  p50 ${fmtUs(side.p50.bare.p50Us)}  p99 ${fmtUs(side.p50.bare.p99Us)}`,
    );
    console.log(
      `  ratio ${ratio.toFixed(2)} (p50 ratio ${(side.p50.bare.p50Us / side.p50.ours.p50Us).toFixed(2)})  ${verdict(ratio, 0.5, 'min')}`,
    );
    console.log(
      recordTarget({
        bench: 'knowledge',
        measure: `POST /api/search / bare minisearch route (${name})`,
        figure: ratio,
        target: atLeast(0.5),
      }),
    );
  }
  console.log(`  (bare minisearch query in process, no HTTP: ${fmtRate(search.inProcess.perSec)})`);

  const events = Number(values.events);
  const rebuilt = await rebuild(events, corpus, config);
  console.log(`index rebuild from the log (${events.toLocaleString('en-US')} verdicts) and the documents:`);
  console.log(`  fold knowledge-facts + build the whole index  ${rebuilt.full.toFixed(1)} ms`);
  console.log(
    `  read the same log with a no-op fold           ${rebuilt.readOnly.toFixed(1)} ms  (ratio ${(rebuilt.full / rebuilt.readOnly).toFixed(2)})`,
  );
  console.log(
    `  documents' index ${rebuilt.docsMs.toFixed(1)} ms vs bare minisearch addAll ${rebuilt.bareMs.toFixed(1)} ms (ratio ${(rebuilt.docsMs / rebuilt.bareMs).toFixed(2)})`,
  );

  const before = heapAfterGc();
  const kept = new KnowledgeIndex(corpus);
  const after = heapAfterGc();
  console.log(
    `index memory: ${((after - before) / 1024 / 1024).toFixed(2)} MiB for ${kept.size} passages (${(chars / 1024 / 1024).toFixed(2)} MiB of text)`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await run(process.argv.slice(2));
}
