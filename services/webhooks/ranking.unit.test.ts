import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { FAILED_READ_HOLD_MS, MarketRanking, type RankedMarket } from './ranking.ts';

const logger = pino({ level: 'silent' });
const HOUR = 3_600_000;

/** A venue whose ranking is whatever `order` holds when a load reads it; loads end when released. */
function venue() {
  const v = {
    clock: 10 * HOUR,
    order: ['BTC', 'ETH'],
    loads: 0,
    held: [] as Array<() => void>,
    hold: false,
    fail: false,
    load: async (): Promise<RankedMarket[]> => {
      v.loads += 1;
      if (v.fail) throw new Error('feed down');
      const ranked = v.order.map((coin) => ({ coin, quoteVolume24h: null }));
      if (v.hold) await new Promise<void>((resolve) => v.held.push(resolve));
      return ranked;
    },
  };
  return v;
}

/** An event of the 11:00 close a minute after it, the venue ranking ETH first by then. */
async function nextClose(v: ReturnType<typeof venue>, ranking: MarketRanking): Promise<void> {
  v.clock = 11 * HOUR + 60_000;
  v.order = ['ETH', 'BTC'];
  await ranking.prepare('BINANCE', 11 * HOUR);
}

describe('venue ranking on the feed clock', () => {
  it('is read once per close: an event of a later close reads it again, however little wall time passed', async () => {
    const v = venue();
    const ranking = new MarketRanking(v.load, logger, () => v.clock);
    await ranking.prepare('BINANCE', 10 * HOUR);
    await ranking.prepare('BINANCE', 10 * HOUR);
    await ranking.prepare('BINANCE', 9 * HOUR); // a late event: the ranking held is the newest there is
    expect(v.loads).toBe(1);
    await nextClose(v, ranking);
    expect(v.loads).toBe(2);
    expect(ranking.rankOf('BINANCE', 'eth')).toBe(0);
  });

  it('reads no ranking later than the clock: a close ahead of it is read once, not on every event', async () => {
    const v = venue();
    const ranking = new MarketRanking(v.load, logger, () => v.clock);
    await ranking.prepare('BINANCE', 12 * HOUR);
    await ranking.prepare('BINANCE', 12 * HOUR);
    expect(v.loads).toBe(1);
  });

  it('shares a read in flight with the events of its close, and keeps the later of two reads ending out of order', async () => {
    const v = venue();
    v.hold = true;
    const ranking = new MarketRanking(v.load, logger, () => v.clock);
    const a = ranking.prepare('BINANCE', 10 * HOUR);
    const b = ranking.prepare('BINANCE', 10 * HOUR);
    expect(v.loads).toBe(1);
    // The next close comes while that read is in flight: its events read again.
    v.clock = 11 * HOUR;
    v.order = ['ETH', 'BTC'];
    const c = ranking.prepare('BINANCE', 11 * HOUR);
    expect(v.loads).toBe(2);
    v.held[1]!();
    await c;
    v.held[0]!();
    await Promise.all([a, b]);
    expect(ranking.ranked('BINANCE').map((m) => m.coin)).toEqual(['ETH', 'BTC']);
  });

  it('a read that fails answers every event of its close, read once and logged once; the next close reads again', async () => {
    const v = venue();
    const lines: string[] = [];
    const warnings = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const wall = 0;
    const ranking = new MarketRanking(
      v.load,
      warnings,
      () => v.clock,
      () => wall,
    );
    v.clock = 9 * HOUR + 60_000;
    await ranking.prepare('BINANCE', 9 * HOUR);
    v.fail = true;
    v.clock = 10 * HOUR + 60_000;
    // Concurrent events of the close share its read; later ones of the same close wait for none.
    await Promise.all([ranking.prepare('BINANCE', 10 * HOUR), ranking.prepare('BINANCE', 10 * HOUR)]);
    for (let event = 0; event < 5; event++) await ranking.prepare('BINANCE', 10 * HOUR);
    // Not made again here: the feed retries a venue's request itself.
    expect(v.loads).toBe(1 + 1);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ exchange: 'BINANCE' });
    // The close's events are filtered by the last ranking read.
    expect(ranking.rankOf('BINANCE', 'BTC')).toBe(0);
    // Another venue's read is its own.
    v.fail = false;
    await ranking.prepare('BYBIT', 10 * HOUR);
    expect(v.loads).toBe(3);
    await nextClose(v, ranking);
    expect(v.loads).toBe(4);
    expect(ranking.rankOf('BINANCE', 'ETH')).toBe(0);
  });

  it('a close whose read failed reads again once the hold has passed: a digest asks at its period start on every tick', async () => {
    const v = venue();
    let wall = 0;
    const lines: string[] = [];
    const warnings = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const ranking = new MarketRanking(
      v.load,
      warnings,
      () => v.clock,
      () => wall,
    );
    v.fail = true;
    v.clock = 10 * HOUR + 60_000;
    await ranking.prepare('BINANCE', 10 * HOUR);
    expect(ranking.ranked('BINANCE')).toEqual([]);
    // Failing again after the hold: read again, not warned again for the same close.
    wall += FAILED_READ_HOLD_MS;
    await ranking.prepare('BINANCE', 10 * HOUR);
    expect(v.loads).toBe(2);
    expect(lines).toHaveLength(1);
    v.fail = false;
    wall += FAILED_READ_HOLD_MS - 1;
    await ranking.prepare('BINANCE', 10 * HOUR);
    expect(v.loads).toBe(2);
    wall += 1;
    await ranking.prepare('BINANCE', 10 * HOUR);
    expect(v.loads).toBe(3);
    expect(ranking.ranked('BINANCE').length).toBeGreaterThan(0);
  });
});
