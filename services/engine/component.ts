import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import type { Slice } from '../component.ts';
import { failureFields } from '../shared/run-failure.ts';
import type { SignalEngine } from './engine.ts';
import { scheduledMarkets, VerdictScheduler } from './scheduler.ts';

/**
 * The signals slice's background side, on the `engine` role: verdicts computed and recorded as
 * candles close. (Its calls are sold through the channels and payments slices.)
 */
export function engineComponent(deps: { config: Config; engine: SignalEngine; logger: Logger }): Slice & {
  scheduler: VerdictScheduler;
} {
  const { config, engine, logger } = deps;
  const { exchanges, timeframes } = scheduledMarkets(config, engine.feed);
  const scheduler = new VerdictScheduler({
    engine,
    feed: engine.feed,
    timeframes,
    exchange: exchanges[0]!,
    exchanges,
    topN: config.SCHEDULE_TOP_N,
    logger,
  });
  return {
    name: 'engine',
    roles: ['engine'],
    processors: [{ name: 'verdict-scheduler' }],
    scheduler,
    async start() {
      scheduler.start();
    },
    async stop() {
      await scheduler.stop();
      // The scales the last closes moved, so that the next start goes on with them.
      await engine.saveBandScales().catch((err: unknown) => {
        logger.warn({ err }, 'band scales not saved at stop');
      });
    },
    startUpWork: () => scheduler.firstRound,
    checks() {
      return {
        scheduler: async () => {
          const failure = scheduler.lastFailure;
          if (failure === null) return { ok: true, ...scheduler.stats };
          // Its words may name the store's host: /readyz shows the reason, the log the error.
          return { ok: false, ...scheduler.stats, ...failureFields(failure) };
        },
      };
    },
  };
}
