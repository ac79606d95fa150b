import type { Logger } from 'pino';
import { z } from 'zod';
import { EXCHANGES, Exchange } from '../../contracts/market.ts';
import { LiveFeed, type LiveFeedOptions } from './live.ts';
import type { MarketFeed } from './port.ts';
import { openReplayFeed, type ReplayFeedOptions } from './replay.ts';

export const FeedMode = z.enum(['live', 'replay', 'auto']);
export type FeedMode = z.infer<typeof FeedMode>;

export interface SelectFeedOptions {
  mode: FeedMode;
  replay?: ReplayFeedOptions;
  live?: LiveFeedOptions;
  /** Bound on the start-up probe in auto mode. Default 3 s. */
  probeTimeoutMs?: number;
  /** Whether the live venues answer; default loads each venue's markets. Injectable for tests. */
  probe?: (feed: LiveFeed) => Promise<boolean>;
  logger?: Logger;
}

export interface SelectedFeed {
  feed: MarketFeed;
  /** Why this feed was chosen, for the start-up log and /readyz. */
  reason: string;
}

const Time = z.union([z.coerce.number().int().positive(), z.iso.datetime().transform((s) => Date.parse(s))]);

const FeedEnv = z.object({
  FEED: FeedMode.default('auto'),
  MARKET_DATA_DIR: z.string().min(1).optional(),
  REPLAY_SPEED: z.coerce.number().nonnegative().optional(),
  REPLAY_START: Time.optional(),
  LIVE_EXCHANGES: z
    .string()
    .transform((s) => s.split(',').map((x) => x.trim().toUpperCase()))
    .pipe(z.array(Exchange))
    .optional(),
  FEED_PROBE_TIMEOUT_MS: z.coerce.number().int().positive().optional(),
});

/**
 * Reads the feed configuration: FEED=live|replay|auto, MARKET_DATA_DIR (replay directory,
 * default the shipped slice), REPLAY_SPEED (feed ms per wall ms), REPLAY_START (ISO time or Unix
 * ms), LIVE_EXCHANGES (comma list), FEED_PROBE_TIMEOUT_MS.
 */
export function feedOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): SelectFeedOptions {
  const parsed = FeedEnv.safeParse(env);
  if (!parsed.success) {
    throw new Error(`market feed configuration: ${z.prettifyError(parsed.error)}`);
  }
  const e = parsed.data;
  return {
    mode: e.FEED,
    replay: {
      ...(e.MARKET_DATA_DIR !== undefined ? { dir: e.MARKET_DATA_DIR } : {}),
      ...(e.REPLAY_SPEED !== undefined ? { speed: e.REPLAY_SPEED } : {}),
      ...(e.REPLAY_START !== undefined ? { start: e.REPLAY_START } : {}),
    },
    live: { exchanges: e.LIVE_EXCHANGES ?? EXCHANGES },
    ...(e.FEED_PROBE_TIMEOUT_MS !== undefined ? { probeTimeoutMs: e.FEED_PROBE_TIMEOUT_MS } : {}),
  };
}

/**
 * Chooses the market feed. `auto` probes the live venues for at most `probeTimeoutMs` and uses
 * them when any answers, else the replay data; either way the choice and its reason are logged,
 * and every figure later carries `feed.kind`.
 */
export async function selectFeed(options: SelectFeedOptions): Promise<SelectedFeed> {
  const { logger } = options;
  const withLogger = <T extends object>(o: T | undefined) => ({ ...o, ...(logger ? { logger } : {}) }) as T;
  const replay = async (reason: string): Promise<SelectedFeed> => {
    const feed = await openReplayFeed(withLogger(options.replay));
    logger?.info({ feed: 'replay', reason }, 'market feed selected');
    return { feed, reason };
  };
  if (options.mode === 'replay') return replay('FEED=replay');
  const live = new LiveFeed(withLogger(options.live));
  if (options.mode === 'live') {
    logger?.info({ feed: 'live', reason: 'FEED=live' }, 'market feed selected');
    return { feed: live, reason: 'FEED=live' };
  }
  const timeoutMs = options.probeTimeoutMs ?? 3000;
  const probe = options.probe ?? ((feed: LiveFeed) => feed.probe());
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    probe(live).then(
      (ok) => (ok ? 'reachable' : 'no live venue answered'),
      (error: unknown) => `probe failed: ${error instanceof Error ? error.message : String(error)}`,
    ),
    new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve(`no live venue answered within ${timeoutMs} ms`), timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  if (outcome === 'reachable') {
    const up = live
      .venues()
      .filter((v) => v.ok)
      .map((v) => v.exchange);
    const reason = `FEED=auto: live venues reachable (${up.join(', ')})`;
    logger?.info({ feed: 'live', reason, venues: live.venues() }, 'market feed selected');
    return { feed: live, reason };
  }
  await live.close();
  return replay(`FEED=auto: ${outcome}; replaying recorded data`);
}
