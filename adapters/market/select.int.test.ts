import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { silentServer } from '../../test/silent-server.ts';
import { fixtureFetch } from './fixture-fetch.ts';
import type { FetchImplementation } from './live.ts';
import type { MarketFeed } from './port.ts';
import { feedOptionsFromConfig, selectFeed } from './select.ts';

const opened: MarketFeed[] = [];
afterEach(async () => {
  for (const feed of opened.splice(0)) await feed.close();
});
const keep = <T extends { feed: MarketFeed }>(selected: T) => {
  opened.push(selected.feed);
  return selected;
};
const replay = { run: false };

describe('selectFeed', () => {
  it('falls back to replay when the probe does not finish in time', async () => {
    const { feed, reason } = keep(
      await selectFeed({ mode: 'auto', replay, probeTimeoutMs: 50, probe: () => new Promise(() => {}) }),
    );
    expect(feed.kind).toBe('replay');
    expect(reason).toBe('FEED=auto: no live venue answered within 50 ms; replaying recorded data');
  });

  it('says so in one info line without venue access, never a level-50 error', async () => {
    const lines: Array<{ level: number; msg: string }> = [];
    const logger = pino(
      { level: 'debug' },
      { write: (line: string) => lines.push(JSON.parse(line) as { level: number; msg: string }) },
    );
    const unreachable = async () => {
      throw new TypeError('fetch failed');
    };
    const { feed } = keep(
      await selectFeed({
        mode: 'auto',
        replay,
        logger,
        live: { fetchImplementation: unreachable, retries: 0, exchanges: ['BINANCE', 'OKX'] },
      }),
    );
    expect(feed.kind).toBe('replay');
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    expect(lines.filter((l) => l.msg.startsWith('live venues unreachable, replaying'))).toHaveLength(1);
  });

  it('warns of the fallback in production, where replayed data served as live is a fault', async () => {
    expect(feedOptionsFromConfig(loadConfig({ NODE_ENV: 'production' })).fallbackLevel).toBe('warn');
    expect(feedOptionsFromConfig(loadConfig({})).fallbackLevel).toBe('info');
    const lines: Array<{ level: number; msg: string }> = [];
    const logger = pino(
      { level: 'debug' },
      { write: (line: string) => lines.push(JSON.parse(line) as { level: number; msg: string }) },
    );
    keep(
      await selectFeed({
        mode: 'auto',
        replay,
        logger,
        fallbackLevel: 'warn',
        probeTimeoutMs: 50,
        probe: () => new Promise(() => {}),
      }),
    );
    const said = lines.filter((l) => l.msg.startsWith('live venues unreachable, replaying'));
    expect(said.map((l) => l.level)).toEqual([40]);
  });

  it('falls back to replay when every venue fails (closed network, real probe path)', async () => {
    let calls = 0;
    const unreachable = async () => {
      calls++;
      throw new TypeError('fetch failed');
    };
    const { feed, reason } = keep(
      await selectFeed({
        mode: 'auto',
        replay,
        live: { fetchImplementation: unreachable, retries: 0, exchanges: ['BINANCE', 'OKX'] },
      }),
    );
    expect(feed.kind).toBe('replay');
    expect(reason).toMatch(/no live venue answered; replaying/);
    expect(calls).toBeGreaterThanOrEqual(2);
  });

  it('uses live when a venue answers the probe', async () => {
    const { fetch } = fixtureFetch([
      {
        method: 'GET',
        url: 'https://fapi.binance.com/fapi/v1/exchangeInfo',
        reply: 'binance-usdm/exchangeInfo.json',
      },
    ]);
    const { feed, reason } = keep(
      await selectFeed({
        mode: 'auto',
        replay,
        live: { fetchImplementation: fetch, retries: 0, exchanges: ['BINANCE'] },
      }),
    );
    expect(feed.kind).toBe('live');
    expect(reason).toBe('FEED=auto: live venues reachable (BINANCE)');
    expect(feed.venues()).toEqual([{ exchange: 'BINANCE', ok: true, lastOkAt: expect.any(Number) }]);
  });

  it('ends a probe that gets no answer when the start is stopped, rejecting with the stop', async () => {
    // Every venue's request reaches a port that takes the connection and never answers: the
    // probe's own bound (10 minutes here) is all that would end it.
    const silent = await silentServer();
    const { port, sockets } = silent;
    try {
      const toSilent: FetchImplementation = (url, init) =>
        fetch(`http://127.0.0.1:${port}${new URL(url).pathname}`, init as RequestInit);
      const stop = new AbortController();
      const selecting = selectFeed({
        mode: 'auto',
        replay,
        probeTimeoutMs: 600_000,
        live: {
          fetchImplementation: toSilent,
          retries: 0,
          timeoutMs: 600_000,
          exchanges: ['BINANCE', 'OKX'],
        },
        signal: stop.signal,
      });
      selecting.catch(() => {});
      await expect.poll(() => sockets.length > 0, { interval: 20 }).toBe(true);
      const reason = new Error('SIGTERM while starting');
      stop.abort(reason);
      await expect(selecting).rejects.toBe(reason);
    } finally {
      await silent.close();
    }
  }, 30_000);

  it('does not probe when the mode is explicit', async () => {
    let probed = false;
    const probe = async () => {
      probed = true;
      return true;
    };
    expect(keep(await selectFeed({ mode: 'replay', replay, probe })).feed.kind).toBe('replay');
    const live = keep(await selectFeed({ mode: 'live', probe, live: { exchanges: ['OKX'] } }));
    expect(live.feed.kind).toBe('live');
    expect(live.feed.venues()).toEqual([{ exchange: 'OKX', ok: false, lastError: 'not contacted yet' }]);
    expect(probed).toBe(false);
  });
});

describe('feedOptionsFromConfig', () => {
  it('reads the feed settings from the validated configuration', () => {
    expect(
      feedOptionsFromConfig(
        loadConfig({
          FEED: 'replay',
          MARKET_DATA_DIR: '/data/market',
          REPLAY_SPEED: '3600',
          REPLAY_START: '2025-10-20T00:00:00Z',
          LIVE_EXCHANGES: 'binance, okx',
          FEED_PROBE_TIMEOUT_MS: '1500',
        }),
      ),
    ).toEqual({
      mode: 'replay',
      replay: { dir: '/data/market', speed: 3600, start: Date.UTC(2025, 9, 20) },
      live: { exchanges: ['BINANCE', 'OKX'] },
      probeTimeoutMs: 1500,
      fallbackLevel: 'info',
    });
    expect(feedOptionsFromConfig(loadConfig({})).mode).toBe('auto');
    expect(feedOptionsFromConfig(loadConfig({ REPLAY_START: '1761000000000' })).replay?.start).toBe(
      1761000000000,
    );
  });

  it('rejects bad settings with a message naming the variable', () => {
    expect(() => loadConfig({ FEED: 'paper' })).toThrow(/FEED/);
    expect(() => loadConfig({ LIVE_EXCHANGES: 'BINANCE,KRAKEN' })).toThrow(/LIVE_EXCHANGES/);
    expect(() => loadConfig({ REPLAY_SPEED: '-1' })).toThrow(/REPLAY_SPEED/);
    expect(() => loadConfig({ SCHEDULE_TIMEFRAMES: '1h,7m' })).toThrow(/SCHEDULE_TIMEFRAMES/);
  });
});
