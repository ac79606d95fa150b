import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Bus } from '../adapters/bus/port.ts';
import type { Cache } from '../adapters/cache/port.ts';
import { type AppendWatch, watchAppends } from '../adapters/event-store/append-watch.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
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
  close(): Promise<void>;
}

/**
 * A command that only reads the log (the operator's `list`, the history CLI's `--store`) refuses a
 * DATA_DIR that holds no LMDB log instead of opening, and so creating, an empty one: a mistyped
 * DATA_DIR would otherwise answer "no keys". Thrown before any adapter is opened.
 */
export class NoEventStoreError extends Error {
  override readonly name = 'NoEventStoreError';
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
 * requireExistingStore, and on PostgreSQL the same for POSTGRES_SCHEMA: opening the store runs
 * the migrations, so a mistyped schema would be created empty and a read would
 * answer "no keys". A server out of reach is left to the store's own opening, which names it.
 */
export async function requireExistingLog(
  config: Pick<Config, 'EVENT_STORE' | 'DATA_DIR' | 'POSTGRES_URL' | 'POSTGRES_SCHEMA'>,
): Promise<void> {
  requireExistingStore(config);
  if (config.EVENT_STORE !== 'postgres' || config.POSTGRES_URL === undefined) return;
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: config.POSTGRES_URL, connectionTimeoutMillis: 2_000 });
  // The client's own errors after a failed connect would otherwise be unhandled.
  client.on('error', () => undefined);
  let found: boolean;
  try {
    await client.connect();
    const { rows } = await client.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [
      `${config.POSTGRES_SCHEMA}.events`,
    ]);
    found = rows[0]?.found === true;
  } catch {
    return;
  } finally {
    await client.end().catch(() => undefined);
  }
  if (found) return;
  throw new NoEventStoreError(
    `POSTGRES_SCHEMA=${config.POSTGRES_SCHEMA} at ${maskUrlCredentials(config.POSTGRES_URL)} holds no event log ` +
      `(no table ${config.POSTGRES_SCHEMA}.events): set POSTGRES_SCHEMA and POSTGRES_URL to the service's; ` +
      'a command that only reads does not create one',
  );
}

/**
 * Chooses each port's adapter from configuration: embedded by default (LMDB, in-process bus and
 * cache), the distributed engines when EVENT_STORE/BUS/CACHE say so. Adapters are imported
 * lazily so an embedded start never loads the network clients. The bus is opened as configured
 * only when asked (`bus: true`: the roles that carry events on it, the relay and the dispatcher);
 * elsewhere an in-process one stands in, unused, so an api replica or an operator command starts
 * while NATS is down, as it keeps serving through an outage.
 */
export async function openAdapters(
  config: Config,
  logger: Logger,
  { bus: needBus = false }: { bus?: boolean } = {},
): Promise<Adapters> {
  const opened: { close(): Promise<void> }[] = [];
  try {
    const stores = await openStores(config, logger);
    const { closeProjections } = stores;
    // Every write of every role goes through here, appends and snapshot saves alike, so a store
    // that stops completing writes (a lock held by a stopped process, a server that no longer
    // answers) shows in /readyz.
    const { store: eventStore, watch: appends, watchSnapshots } = watchAppends(stores.eventStore);
    const projectionStore = watchSnapshots(stores.projectionStore);
    opened.push(eventStore, { close: closeProjections });
    const bus = await openBus(needBus ? config : { ...config, BUS: 'memory' }, logger);
    opened.push(bus);
    const cache = await openCache(config, logger);
    opened.push(cache);
    return {
      eventStore,
      appends,
      projectionStore,
      bus,
      cache,
      async close() {
        // Reverse order: followers of the store stop before the store itself.
        for (const adapter of [cache, bus, { close: closeProjections }, eventStore]) {
          await adapter.close().catch((err: unknown) => logger.error({ err }, 'closing an adapter failed'));
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

async function openStores(config: Config, logger: Logger) {
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
      makeDirectory(path);
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
        logger,
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
      const eventStore = await connectKurrentEventStore({ connectionString: config.KURRENTDB_URL! });
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

async function openBus(config: Config, logger: Logger): Promise<Bus> {
  if (config.BUS === 'nats') {
    const { connectNatsBus } = await import('../adapters/bus/nats.ts');
    return connectNatsBus({
      url: config.NATS_URL,
      stream: config.NATS_STREAM,
      subjectPrefix: config.NATS_SUBJECT_PREFIX,
      replicas: config.NATS_STREAM_REPLICAS,
      consumerReplicas: config.NATS_CONSUMER_REPLICAS,
      startupTimeoutMs: config.NATS_STARTUP_TIMEOUT_MS,
      logger,
    });
  }
  const { MemoryBus } = await import('../adapters/bus/memory.ts');
  return new MemoryBus();
}

async function openCache(config: Config, logger: Logger): Promise<Cache> {
  if (config.CACHE === 'redis') {
    const { connectRedisCache } = await import('../adapters/cache/redis.ts');
    return connectRedisCache({ url: config.REDIS_URL, prefix: config.REDIS_PREFIX, logger });
  }
  const { createMemoryCache } = await import('../adapters/cache/memory.ts');
  return createMemoryCache();
}
