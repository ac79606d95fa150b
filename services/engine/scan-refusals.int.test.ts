import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import {
  type ScanFundingArbInput,
  ScanFundingArbOutput,
  ScanTradeCallsOutput,
} from '../../contracts/tools.ts';
import { anonymousCaller, toolCallDeps } from '../../test/tool-call-harness.ts';
import { callTool } from '../api/mcp/tool-call.ts';
import { signalTools } from '../api/mcp/tool-registry.ts';
import type { QuotaMeter } from '../metering/quota-meter.ts';
import { SignalEngine } from './engine.ts';
import { describeFailure } from './operation-errors.ts';
import type { SignalOperations } from './operations.ts';

/** What get_trade_call answers for BYBIT, BINANCE at 15m and 1m on the shipped replay. */
const BYBIT_REFUSAL =
  'exchange BYBIT is not served by the replay feed: the replay data has no BYBIT candles (funding only); candles are served for BINANCE_SPOT, BINANCE';
// Naming no coin: a scan names none, and every coin of the shipped replay has the same files.
const PERP_TIMEFRAME =
  'timeframe 15m is not available for BINANCE: the replay data holds 1h candles of every coin here, which build 1h, 2h, 4h, 8h, 12h, 1d; 15m is served on BINANCE_SPOT (or on the live feed)';
const ONE_MINUTE =
  'timeframe 1m is not available for BINANCE_SPOT: the replay data holds 5m, 1h candles of every coin here, which build 5m, 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d; 1m is served by no replayed venue (or on the live feed)';

const meters: QuotaMeter[] = [];
let engine: SignalEngine;
let store: MemoryEventStore;

beforeAll(async () => {
  store = new MemoryEventStore();
  engine = new SignalEngine({ feed: await openReplayFeed({ run: false }), store });
});
afterAll(async () => {
  await engine.close();
});
afterEach(async () => {
  await Promise.all(meters.splice(0).map((m) => m.counters.stop()));
});

/** The sold scan tools over the engine, as MCP calls them, metered on a fresh quota. */
function scanTools() {
  // Only the scan tools are registered: the engine is every operation but the track record.
  const tools = signalTools(engine as unknown as SignalOperations).filter((t) => t.name.startsWith('scan_'));
  const deps = toolCallDeps(tools, meters);
  const caller = anonymousCaller('10.0.0.7');
  return async (name: string, args: unknown) => {
    const result = await callTool(deps, { name, args, caller });
    const content = result.structuredContent as { code?: string; _service: { quota: { used: number } } };
    const text = (result.content as { text: string }[])[0]!.text;
    return { isError: result.isError === true, content, text, used: content._service.quota.used };
  };
}

describe('scan_trade_calls refuses a venue and timeframe no market of it is served on', () => {
  it('answers what get_trade_call answers for the same venue and timeframe, and takes no unit of quota', async () => {
    const cases = [
      { args: { exchange: 'BYBIT' }, code: 'unsupported_exchange', message: BYBIT_REFUSAL },
      // The perpetual's replay candles are 1h: the default 15m is not built there.
      { args: { exchange: 'BINANCE' }, code: 'unsupported_timeframe', message: PERP_TIMEFRAME },
      { args: { timeframe: '1m' }, code: 'unsupported_timeframe', message: ONE_MINUTE },
    ] as const;
    const call = scanTools();
    for (const { args, code, message } of cases) {
      const refused = await call('scan_trade_calls', args);
      expect(refused).toMatchObject({ isError: true, content: { code }, used: 0 });
      expect(refused.text).toBe(`${code}: ${message}`);
      // The engine's refusal: the status and message the x402 route answers, as a trade call's.
      const failure = describeFailure(await engine.scanTradeCalls(args).catch((e: unknown) => e));
      expect(failure).toEqual({ status: 422, code, message, retryable: false });
    }
    // The trade call of the venue's first market, refused with the same code and words.
    const call1 = await engine.getTradeCall({ coin: 'ETH', exchange: 'BINANCE' }).catch((e: unknown) => e);
    expect(describeFailure(call1)).toEqual({
      status: 422,
      code: 'unsupported_timeframe',
      message: PERP_TIMEFRAME,
      retryable: false,
    });
    // Nothing recorded by the refusals; a served scan is the first call counted.
    expect(await store.headPosition()).toBe(0);
    const served = await call('scan_trade_calls', { exchange: 'BINANCE', timeframe: '1h', topN: 2 });
    expect(served).toMatchObject({ isError: false, used: 1 });
  });
});

/** A replay folder holding the shipped files named (a path under both), removed after the file's tests. */
function replayDir(): { dir: string; link: (path: string) => void } {
  const dir = mkdtempSync(join(tmpdir(), 'scan-refusals-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return {
    dir,
    link: (path) => {
      mkdirSync(join(dir, path, '..'), { recursive: true });
      symlinkSync(join(SHIPPED_MARKET_DIR, path), join(dir, path));
    },
  };
}

describe('a venue served for some of its markets keeps naming the others in skipped', () => {
  const { dir, link } = replayDir();
  beforeAll(() => {
    // BINANCE_SPOT: BTC with 5m and 1h, ETH with 1h only; BINANCE: BTC candles, BTC and ETH funding.
    for (const file of ['BTCUSDT-5m', 'BTCUSDT-1h', 'ETHUSDT-1h'])
      link(`candles/binance-spot/${file}.csv.gz`);
    link('candles/binance-usdm/BTCUSDT-1h.csv.gz');
    for (const coin of ['BTC', 'ETH']) link(`funding/binance/${coin}USDT.csv.gz`);
  });

  it('answers rows for the served markets and the reason for each other one', async () => {
    const partial = new SignalEngine({
      feed: await openReplayFeed({ run: false, dir }),
      store: new MemoryEventStore(),
    });
    try {
      const spot = ScanTradeCallsOutput.parse(await partial.scanTradeCalls({ exchange: 'BINANCE_SPOT' }));
      expect(spot.calls.map((c) => c.coin)).toEqual(['BTC']);
      expect(spot.skipped).toEqual([
        { coin: 'ETH', reason: expect.stringMatching(/^timeframe 15m is not available for BINANCE_SPOT/) },
      ]);
      const perp = ScanTradeCallsOutput.parse(
        await partial.scanTradeCalls({ exchange: 'BINANCE', timeframe: '1h' }),
      );
      expect(perp.calls.map((c) => c.coin)).toEqual(['BTC']);
      expect(perp.skipped).toEqual([{ coin: 'ETH', reason: 'no candles for ETH on BINANCE' }]);
      // Neither market served at 15m on the perpetual (BTC's 1h builds no 15m, ETH has no candles).
      const refused = await partial.scanTradeCalls({ exchange: 'BINANCE' }).catch((e: unknown) => e);
      expect(describeFailure(refused)).toMatchObject({ status: 422, code: 'unsupported_timeframe' });
    } finally {
      await partial.close();
    }
  });
});

describe('scan_funding_arb refuses what is not served, as the other tools do', () => {
  it('a named venue without funding, a coin listed on no venue: refused, no unit of quota taken', async () => {
    const cases: { args: ScanFundingArbInput; code: string; message: string; status: number }[] = [
      {
        args: { exchanges: ['BINANCE', 'OKX'] },
        code: 'unsupported_exchange',
        message:
          'exchange OKX is not served by the replay feed: the replay data has no OKX files; served: BINANCE_SPOT (candles), BINANCE (candles and funding), BYBIT (funding), HYPERLIQUID (funding)',
        status: 422,
      },
      {
        args: { exchanges: ['BINANCE_SPOT', 'BYBIT'] },
        code: 'unsupported_exchange',
        message:
          'exchange BINANCE_SPOT is not served by the replay feed: a spot venue has no funding; use BINANCE for the perpetual',
        status: 422,
      },
      {
        args: { coins: ['NOPE'] },
        code: 'unknown_coin',
        message:
          'NOPE is not listed with funding on BINANCE, BYBIT, HYPERLIQUID (coins served there: BNB, BTC, DOGE, ETH, SOL, XRP)',
        status: 404,
      },
      {
        args: { coins: ['BTC', 'NOPE', 'ZZZ'], exchanges: ['BYBIT', 'HYPERLIQUID'] },
        code: 'unknown_coin',
        message:
          'NOPE, ZZZ are not listed with funding on BYBIT, HYPERLIQUID (coins served there: BNB, BTC, DOGE, ETH, SOL, XRP)',
        status: 404,
      },
    ];
    const call = scanTools();
    for (const { args, code, message, status } of cases) {
      const refused = await call('scan_funding_arb', args);
      expect(refused).toMatchObject({ isError: true, content: { code }, used: 0 });
      expect(refused.text).toBe(`${code}: ${message}`);
      const failure = describeFailure(await engine.scanFundingArb(args).catch((e: unknown) => e));
      expect(failure).toEqual({ status, code, message, retryable: false });
    }
    // The same words a trade call on OKX gets; a served scan is the first call counted.
    const okx = await engine.getTradeCall({ coin: 'BTC', exchange: 'OKX' }).catch((e: unknown) => e);
    expect(describeFailure(okx)?.message).toBe(cases[0]!.message);
    const served = await call('scan_funding_arb', { exchanges: ['BINANCE', 'BYBIT'], coins: ['BTC'] });
    expect(served).toMatchObject({ isError: false, used: 1 });
  });

  describe('a served venue that cannot answer', () => {
    const { dir, link } = replayDir();
    beforeAll(() => {
      // BINANCE's candle file is unreadable: its listing (which reads it for the volume) fails.
      link('candles/binance-spot/BTCUSDT-1h.csv.gz');
      mkdirSync(join(dir, 'candles/binance-usdm'), { recursive: true });
      writeFileSync(join(dir, 'candles/binance-usdm/BTCUSDT-1h.csv.gz'), 'not gzip');
      for (const folder of ['binance', 'bybit']) link(`funding/${folder}/BTCUSDT.csv.gz`);
      link('funding/hyperliquid/BTC.csv.gz');
    });

    it('is left out and shown down in venues with why; the others are scanned', async () => {
      const down = new SignalEngine({ feed: await openReplayFeed({ run: false, dir }), store });
      try {
        const scan = ScanFundingArbOutput.parse(await down.scanFundingArb({ minSpreadBps: 0 }));
        expect(scan.venues.map((v) => [v.exchange, v.ok])).toEqual([
          ['BINANCE', false],
          ['BYBIT', true],
          ['HYPERLIQUID', true],
        ]);
        // The reason /readyz gives (failureReason): a file that is not gzip has no known code. Never
        // the error's words (the server's path of the file, a venue's URL).
        expect(scan.venues[0]!.lastError).toBe('failed');
        expect(scan.venues.slice(1).map((v) => v.lastError)).toEqual([undefined, undefined]);
        expect(scan.opportunities.map((o) => o.venues.map((v) => v.exchange).sort())).toEqual([
          ['BYBIT', 'HYPERLIQUID'],
        ]);
        // A coin may be listed on the venue that did not answer: it is not refused as unknown.
        const unknown = await down.scanFundingArb({ coins: ['NOPE'] });
        expect(unknown.opportunities).toEqual([]);
        // A venue named twice is the caller's mistake, refused before any venue is read.
        const twice = await down
          .scanFundingArb({ exchanges: ['BINANCE', 'BINANCE'] })
          .catch((e: unknown) => e);
        expect(describeFailure(twice)).toMatchObject({ status: 400, retryable: false });
        expect(describeFailure(twice)?.message).toContain('exchanges must not repeat');
      } finally {
        await down.close();
      }
    });
  });

  describe('when no venue scanned can answer', () => {
    const { dir, link } = replayDir();
    beforeAll(() => {
      // BINANCE is the only venue with funding here, and its listing cannot be read.
      link('candles/binance-spot/BTCUSDT-1h.csv.gz');
      mkdirSync(join(dir, 'candles/binance-usdm'), { recursive: true });
      writeFileSync(join(dir, 'candles/binance-usdm/BTCUSDT-1h.csv.gz'), 'not gzip');
      link('funding/binance/BTCUSDT.csv.gz');
    });

    it('refuses the call with the venue’s error, retryable', async () => {
      const down = new SignalEngine({ feed: await openReplayFeed({ run: false, dir }), store });
      try {
        const none = await down.scanFundingArb({}).catch((e: unknown) => e);
        expect(describeFailure(none)).toEqual({
          status: 503,
          code: 'venue_unavailable',
          message: 'BINANCE is unavailable: its replay data could not be read',
          retryable: true,
        });
      } finally {
        await down.close();
      }
    });
  });
});

describe('an empty funding scan’s note', () => {
  const { dir, link } = replayDir();
  beforeAll(() => {
    // BTC on three venues, its HYPERLIQUID funding unreadable: two are left to compare. ETH on two,
    // its BYBIT funding unreadable: one is left.
    link('candles/binance-spot/BTCUSDT-1h.csv.gz');
    for (const coin of ['BTCUSDT', 'ETHUSDT']) {
      link(`candles/binance-usdm/${coin}-1h.csv.gz`);
      link(`funding/binance/${coin}.csv.gz`);
    }
    link('funding/bybit/BTCUSDT.csv.gz');
    for (const path of ['funding/bybit/ETHUSDT.csv.gz', 'funding/hyperliquid/BTC.csv.gz']) {
      mkdirSync(join(dir, path, '..'), { recursive: true });
      writeFileSync(join(dir, path), 'not gzip');
    }
  });

  it('counts the listings left out of the coins left with fewer than two venues, not of the others', async () => {
    const scanned = new SignalEngine({ feed: await openReplayFeed({ run: false, dir }), store });
    try {
      const scan = await scanned.scanFundingArb({ minSpreadBps: 10_000 });
      expect(scan.opportunities).toEqual([]);
      expect(scan.note).toMatch(
        /^no opportunity is listed for the 2 coins scanned: 1 has fewer than two venues left to compare \(1 listing could not be read now\); 1 has its best spread below the minimum asked/,
      );
    } finally {
      await scanned.close();
    }
  });
});
