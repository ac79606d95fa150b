import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { beforeAbort, endedBy } from '../adapters/before-abort.ts';
import type { Bus } from '../adapters/bus/port.ts';
import type { Cache } from '../adapters/cache/port.ts';
import { type AppendWatch, watchAppends } from '../adapters/event-store/append-watch.ts';
import { type EventStore, NoEventStoreError } from '../adapters/event-store/port.ts';
import { makeDirectory } from '../adapters/make-directory.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import type { Config } from '../contracts/config.ts';
import { maskUrlCredentials } from '../contracts/mask-url.ts';

export interface Adapters {
  eventStore: EventStore;
  /** The appends of this process through `eventStore` still waiting for the store. */
  appends: AppendWatch;
  projectionStore: ProjectionStore;
  bus: Bus;
  cache: Cache;
  /**
   * Closes them in turn. With `by` (a performance.now() time), one whose close has not ended then
   * is left to the process's exit: a store that keeps its connections open without answering (a
   * partition, a hung server) never ends a close that waits for its reply.
   */
  close(options?: { by?: number }): Promise<void>;
}

/** Throws NoEventStoreError when the configured LMDB log does not exist yet (other stores: never). */
export function requireExistingStore(config: Pick<Config, 'EVENT_STORE' | 'DATA_DIR'>): void {
  if (config.EVENT_STORE !== 'lmdb') return;
  const path = join(config.DATA_DIR, 'events');
  if (existsSync(path)) return;
  throw new NoEventStoreError(
    `DATA_DIR=${config.DATA_DIR} holds no event log (${path} does not exist): set DATA_DIR to the ` +
      "service's data directory; a command that only reads does not create one",
  );
}

/**
 * Chooses each port's adapter from configuration: embedded by default (LMDB, in-process bus and
 * cache), the distributed engines when EVENT_STORE/BUS/CACHE say so. Adapters are imported
 * lazily so an embedded start never loads the network clients. The bus is opened as configured
 * only when asked (`bus: true`: the roles that carry events on it, the relay and the dispatcher);
 * elsewhere an in-process one stands in, unused, so an api replica or an operator command starts
 * while NATS is down, as it keeps serving through an outage. `existingLog`: a command that only
 * reads opens the log only if it exists (a DATA_DIR or PostgreSQL schema without one is refused,
 * NoEventStoreError, and nothing is created), so a mistyped one does not answer "no keys".
 * `signal`: a stop asked for while the process starts; the opening ends at its next step (a wait
 * for NATS, Redis, PostgreSQL or KurrentDB at once) with the signal's reason, and what it opened
 * is closed.
 */
export async function openAdapters(
  config: Config,
  logger: Logger,
  {
    bus: needBus = false,
    existingLog = false,
    signal,
  }: { bus?: boolean; existingLog?: boolean; signal?: AbortSignal } = {},
): Promise<Adapters> {
  const opened: { close(): Promise<void> }[] = [];
  try {
    const stores = await openStores(config, logger, existingLog, signal);
    const { closeProjections } = stores;
    // Every write of every role goes through here, appends and snapshot saves alike, so a store
    // that stops completing writes (a lock held by a stopped process, a server that no longer
    // answers) shows in /readyz.
    const { store: eventStore, watch: appends, watchSnapshots } = watchAppends(stores.eventStore);
    const projectionStore = watchSnapshots(stores.projectionStore);
    opened.push(eventStore, { close: closeProjections });
    signal?.throwIfAborted();
    const bus = await openBus(needBus ? config : { ...config, BUS: 'memory' }, logger, signal);
    opened.push(bus);
    signal?.throwIfAborted();
    const cache = await openCache(config, logger, signal);
    opened.push(cache);
    return {
      eventStore,
      appends,
      projectionStore,
      bus,
      cache,
      async close({ by }: { by?: number } = {}) {
        // Reverse order: followers of the store stop before the store itself.
        const adapters: [string, { close(): Promise<void> }][] = [
          ['cache', cache],
          ['bus', bus],
          ['projection store', { close: closeProjections }],
          ['event store', eventStore],
        ];
        for (const [name, adapter] of adapters) {
          const closing = adapter
            .close()
            .catch((err: unknown) => logger.error({ err, adapter: name }, 'closing an adapter failed'));
          if (by === undefined) {
            await closing;
            continue;
          }
          if (!(await endedBy(closing, by)))
            logger.warn({ adapter: name }, 'an adapter did not close by the stop deadline: left to the exit');
        }
      },
    };
  } catch (err) {
    for (const adapter of opened.reverse()) await adapter.close().catch(() => undefined);
    throw err;
  }
}

/** A log that keeps the projection snapshots itself: closing the log closes them. */
function withOwnSnapshots(store: EventStore & { projectionStore(): ProjectionStore }) {
  return {
    eventStore: store as EventStore,
    projectionStore: store.projectionStore(),
    closeProjections: async () => undefined,
  };
}

async function openStores(config: Config, logger: Logger, existingLog: boolean, signal?: AbortSignal) {
  switch (config.EVENT_STORE) {
    case 'memory': {
      const { MemoryEventStore } = await import('../adapters/event-store/memory.ts');
      const { MemoryProjectionStore } = await import('../adapters/projection-store/memory.ts');
      return {
        eventStore: new MemoryEventStore() as EventStore,
        projectionStore: new MemoryProjectionStore(),
        closeProjections: async () => undefined,
      };
    }
    case 'lmdb': {
      const { openLmdbEventStore } = await import('../adapters/event-store/lmdb.ts');
      const path = join(config.DATA_DIR, 'events');
      if (existingLog) requireExistingStore(config);
      else makeDirectory(path);
      const store = await openLmdbEventStore({ path, logger, readAhead: config.LMDB_READ_AHEAD });
      logger.info({ path }, 'event store: LMDB');
      // Snapshots share the log's environment.
      return withOwnSnapshots(store);
    }
    case 'postgres': {
      const { openPostgresEventStore } = await import('../adapters/event-store/postgres.ts');
      const store = await openPostgresEventStore({
        url: config.POSTGRES_URL!,
        schema: config.POSTGRES_SCHEMA,
        poolSize: config.POSTGRES_POOL_SIZE,
        statementTimeoutMs: config.POSTGRES_STATEMENT_TIMEOUT_MS,
        create: !existingLog,
        logger,
        signal,
      });
      logger.info(
        { url: maskUrlCredentials(config.POSTGRES_URL!), schema: config.POSTGRES_SCHEMA },
        'event store: PostgreSQL (projection snapshots in the same schema)',
      );
      // Snapshots use the store's pool.
      return withOwnSnapshots(store);
    }
    case 'kurrentdb': {
      const { connectKurrentEventStore } = await import('../adapters/event-store/kurrentdb.ts');
      const { LmdbProjectionStore } = await import('../adapters/event-store/lmdb-snapshots.ts');
      const eventStore = await beforeAbort(
        connectKurrentEventStore({ connectionString: config.KURRENTDB_URL! }),
        signal,
        (late) => late.close(),
      );
      // Projection snapshots stay local to the role that folds them (its DATA_DIR volume).
      const path = join(config.DATA_DIR, 'projections');
      makeDirectory(path);
      logger.info({ path }, 'event store: KurrentDB; projection snapshots: local LMDB');
      const projectionStore = LmdbProjectionStore.open(path, logger);
      return {
        eventStore: eventStore as EventStore,
        projectionStore,
        closeProjections: () => projectionStore.close(),
      };
    }
  }
}

async function openBus(config: Config, logger: Logger, signal?: AbortSignal): Promise<Bus> {
  if (config.BUS === 'nats') {
    const { connectNatsBus } = await import('../adapters/bus/nats.ts');
    return connectNatsBus({
      url: config.NATS_URL,
      stream: config.NATS_STREAM,
      subjectPrefix: config.NATS_SUBJECT_PREFIX,
      replicas: config.NATS_STREAM_REPLICAS,
      consumerReplicas: config.NATS_CONSUMER_REPLICAS,
      maxAgeMs: config.NATS_STREAM_MAX_AGE_MS,
      startupTimeoutMs: config.NATS_STARTUP_TIMEOUT_MS,
      logger,
      signal,
    });
  }
  const { MemoryBus } = await import('../adapters/bus/memory.ts');
  return new MemoryBus();
}

async function openCache(config: Config, logger: Logger, signal?: AbortSignal): Promise<Cache> {
  if (config.CACHE === 'redis') {
    const { connectRedisCache } = await import('../adapters/cache/redis.ts');
    return connectRedisCache({ url: config.REDIS_URL, prefix: config.REDIS_PREFIX, logger, signal });
  }
  const { createMemoryCache } = await import('../adapters/cache/memory.ts');
  return createMemoryCache();
}
