import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import { EXCHANGES, type Exchange } from '../../contracts/market.ts';
import { beforeAbort } from '../before-abort.ts';
import type { LiveFeed, LiveFeedOptions } from './live.ts';
import { LIVE_VENUES } from './live-venues.ts';
import type { MarketFeed } from './port.ts';
import { openReplayFeed, type ReplayFeedOptions } from './replay.ts';
import type { ReplayAnchor } from './replay-anchor.ts';
import { defaultReplayData } from './shared-data.ts';

/** FEED of the service configuration: live, replay, or auto (probe live, fall back to replay). */
export type FeedMode = Config['FEED'];

export interface SelectFeedOptions {
  mode: FeedMode;
  replay?: ReplayFeedOptions;
  live?: LiveFeedOptions;
  /** Bound on the start-up probe in auto mode. Default 3 s. */
  probeTimeoutMs?: number;
  /**
   * Level of the line saying `auto` fell back to the replay: warn in production (a production
   * service serving recorded data is something to look at), info elsewhere. Default info.
   */
  fallbackLevel?: 'info' | 'warn';
  /** Whether the live venues answer; default loads each venue's markets. Injectable for tests. */
  probe?: (feed: LiveFeed) => Promise<boolean>;
  logger?: Logger;
  /** Where the deployment's replay clock is kept when REPLAY_ANCHOR is not set (the event log). */
  anchorStore?: (proposal: ReplayAnchor) => Promise<ReplayAnchor>;
  /**
   * A stop asked for while the service starts: it ends `auto`'s probe at once (a SIGTERM need not
   * wait out FEED_PROBE_TIMEOUT_MS), closing the live clients the probe opened, and the selection
   * rejects with the signal's reason.
   */
  signal?: AbortSignal;
}

export interface SelectedFeed {
  feed: MarketFeed;
  /** Why this feed was chosen, for the start-up log and /readyz. */
  reason: string;
}

/**
 * The feed settings of the validated service configuration (contracts/config.ts): FEED,
 * MARKET_DATA_DIR, REPLAY_SPEED, REPLAY_START, LIVE_EXCHANGES, FEED_PROBE_TIMEOUT_MS. Unset,
 * MARKET_DATA_DIR is the full data set beside the checkout when it is there, else the shipped
 * slice (defaultReplayData).
 */
export function feedOptionsFromConfig(
  config: Pick<
    Config,
    | 'FEED'
    | 'MARKET_DATA_DIR'
    | 'REPLAY_SPEED'
    | 'REPLAY_START'
    | 'REPLAY_ANCHOR'
    | 'LIVE_EXCHANGES'
    | 'FEED_PROBE_TIMEOUT_MS'
    | 'NODE_ENV'
  >,
): SelectFeedOptions {
  return {
    mode: config.FEED,
    replay: {
      dir: config.MARKET_DATA_DIR ?? defaultReplayData().dir,
      speed: config.REPLAY_SPEED,
      ...(config.REPLAY_START !== undefined ? { start: config.REPLAY_START } : {}),
      ...(config.REPLAY_ANCHOR !== undefined ? { anchor: config.REPLAY_ANCHOR } : {}),
    },
    live: { exchanges: config.LIVE_EXCHANGES },
    probeTimeoutMs: config.FEED_PROBE_TIMEOUT_MS,
    fallbackLevel: config.NODE_ENV === 'production' ? 'warn' : 'info',
  };
}

/**
 * Chooses the market feed. `auto` probes the live venues for at most `probeTimeoutMs` and uses
 * them when any answers, else the replay data; either way the choice and its reason are logged,
 * and every figure later carries `feed.kind`.
 */
export async function selectFeed(options: SelectFeedOptions): Promise<SelectedFeed> {
  const { logger, signal } = options;
  const withLogger = <T extends object>(o: T | undefined) => ({ ...o, ...(logger ? { logger } : {}) }) as T;
  const replay = async (
    reason: string,
    message = 'market feed selected',
    level: 'info' | 'warn' = 'info',
  ): Promise<SelectedFeed> => {
    const feed = await openReplayFeed(
      withLogger({ ...options.replay, ...(options.anchorStore ? { anchorStore: options.anchorStore } : {}) }),
    );
    logger?.[level]({ feed: 'replay', reason }, message);
    return { feed, reason };
  };
  if (options.mode === 'replay') return replay('FEED=replay');
  const timeoutMs = options.probeTimeoutMs ?? 3000;
  const startedAt = Date.now();
  const fallback = (outcome: string) =>
    replay(
      `FEED=auto: ${outcome}; replaying recorded data`,
      `live venues unreachable, replaying ${options.replay?.dir ?? 'the shipped slice (sample-data/market)'}`,
      options.fallbackLevel ?? 'info',
    );
  // Where no venue's API answers at all (no network, a closed one) the replay is chosen without
  // loading ccxt; with an injected probe or HTTP client, the test that injected it decides.
  if (
    options.mode === 'auto' &&
    options.probe === undefined &&
    options.live?.fetchImplementation === undefined
  ) {
    const exchanges = options.live?.exchanges ?? EXCHANGES;
    if (!(await anyOriginAnswers(exchanges, timeoutMs, signal))) {
      return fallback(`no live venue's API answered within ${timeoutMs} ms`);
    }
  }
  // live.ts loads ccxt (about 50 MB of a process's memory): imported only when a live feed may serve.
  const { LiveFeed } = await import('./live.ts');
  if (options.mode === 'live') {
    const live = new LiveFeed(withLogger(options.live));
    logger?.info({ feed: 'live', reason: 'FEED=live' }, 'market feed selected');
    return { feed: live, reason: 'FEED=live' };
  }
  // The probe runs on its own quiet client: on a machine without venue access every venue
  // fails, which is the expected case here and is summed up in one line below, not logged as
  // an error per venue.
  const quiet = logger?.child({});
  if (quiet) quiet.level = 'silent';
  const live = new LiveFeed({ ...options.live, ...(quiet ? { logger: quiet } : {}) });
  const leftMs = Math.max(0, timeoutMs - (Date.now() - startedAt));
  const probe = options.probe ?? ((feed: LiveFeed) => feed.probe());
  let timer: NodeJS.Timeout | undefined;
  let outcome: string;
  try {
    outcome = await beforeAbort(
      Promise.race([
        probe(live).then(
          (ok) => (ok ? 'reachable' : 'no live venue answered'),
          (error: unknown) => `probe failed: ${error instanceof Error ? error.message : String(error)}`,
        ),
        new Promise<string>((resolve) => {
          timer = setTimeout(() => resolve(`no live venue answered within ${timeoutMs} ms`), leftMs);
        }),
      ]),
      signal,
    );
  } catch (stopped) {
    // Only the stop rejects here (the probe's failure is an outcome): its clients are closed, and
    // a close that fails does not stand in for the stop's reason.
    await live.close().catch(() => undefined);
    throw stopped;
  } finally {
    clearTimeout(timer);
  }
  if (outcome === 'reachable') {
    const up = live
      .venues()
      .filter((v) => v.ok)
      .map((v) => v.exchange);
    if (quiet && logger) quiet.level = logger.level;
    const reason = `FEED=auto: live venues reachable (${up.join(', ')})`;
    logger?.info({ feed: 'live', reason, venues: live.venues() }, 'market feed selected');
    return { feed: live, reason };
  }
  await live.close();
  return fallback(outcome);
}

/**
 * Whether any venue's API origin gives an HTTP answer (any status) within `timeoutMs`; rejects with
 * `stop`'s reason once it is aborted first.
 */
async function anyOriginAnswers(
  exchanges: readonly Exchange[],
  timeoutMs: number,
  stop?: AbortSignal,
): Promise<boolean> {
  const bound = AbortSignal.timeout(timeoutMs);
  const signal = stop ? AbortSignal.any([bound, stop]) : bound;
  try {
    await Promise.any(exchanges.map((e) => fetch(LIVE_VENUES[e].origin, { method: 'HEAD', signal })));
    return true;
  } catch {
    stop?.throwIfAborted();
    return false;
  }
}
