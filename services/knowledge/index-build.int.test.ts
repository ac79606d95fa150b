import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import { onFirstRead } from '../../test/first-read.ts';
import type { KeyedAccess } from '../metering/caller.ts';
import { staticCorpus } from './corpus.ts';
import { knowledgeModule } from './module.ts';
import { KnowledgeIndex } from './search-index.ts';

/** Over the checkout's own corpus: seconds of CPU on a loaded machine, a second when idle. */
describe("the knowledge index's build", () => {
  it('gives the event loop its turns while it builds, and the same index as one built at once', async () => {
    const corpus = await staticCorpus(loadConfig({ NODE_ENV: 'test' }));
    let turns = 0;
    const ticker = setInterval(() => turns++, 1);
    const built = await KnowledgeIndex.build(corpus).finally(() => clearInterval(ticker));
    // Built in one go, the ticker would not have run once before the build ended.
    expect(turns).toBeGreaterThan(0);
    const atOnce = new KnowledgeIndex(corpus);
    expect(built.digest).toBe(atOnce.digest);
    for (const query of ['funding arbitrage', 'webhook signature', 'x402 price of a 1m call']) {
      expect(built.search(query, 5)).toEqual(atOnce.search(query, 5));
    }
  });

  it('ends at the next passage once aborted', async () => {
    const corpus = await staticCorpus(loadConfig({ NODE_ENV: 'test' }));
    // Each passage counted the first time the build reads its title (as it indexes it).
    let indexed = 0;
    const counted = corpus.map((passage) =>
      onFirstRead(passage, 'title', () => {
        indexed++;
      }),
    );
    const stop = new AbortController();
    let atAbort = -1;
    const building = KnowledgeIndex.build(counted, stop.signal);
    setImmediate(() => {
      atAbort = indexed;
      stop.abort();
    });
    await expect(building).rejects.toMatchObject({ name: 'AbortError' });
    // Built through to its end, it would be refused only then, past every passage.
    expect(atAbort).toBeGreaterThan(0);
    expect(indexed).toBe(atAbort);
    expect(indexed).toBeLessThan(corpus.length);
  });

  it("is not waited for by the slice's stop, and a stop during it is no failure of the index", async () => {
    const lines: { level: number; msg: string }[] = [];
    const module = knowledgeModule({
      config: loadConfig({ NODE_ENV: 'test' }),
      adapters: {
        eventStore: new MemoryEventStore(),
        projectionStore: new MemoryProjectionStore(),
        cache: new MemoryCache(),
      },
      logger: pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) }),
      channel: (): KeyedAccess => {
        throw new Error('no request is served here');
      },
    });
    await module.start();
    // A SIGTERM soon after the start: the stop waited for the whole build.
    await module.stop();
    expect(await module.checks!()['knowledge-index']!()).toEqual({ ok: true, built: false, passages: 0 });
    expect(lines.map((l) => l.msg)).not.toContain('knowledge index built');
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
  });
});
