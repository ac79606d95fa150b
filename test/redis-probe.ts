import { Redis } from 'ioredis';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * Null when Redis answers PING, else why not. Suites skip (loudly) only outside CI; with
 * CI=true they run and fail, so an unreachable Redis never passes silently.
 */
export async function redisUnreachable(url = REDIS_URL): Promise<string | null> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 0 });
  let cause: string | null = null;
  client.on('error', (error: Error) => {
    cause ??= error.message;
  });
  try {
    await client.connect();
    await client.ping();
    return null;
  } catch (error) {
    return cause ?? (error instanceof Error ? error.message : String(error));
  } finally {
    client.disconnect();
  }
}

export async function shouldRunRedisSuite(name: string): Promise<boolean> {
  const unreachable = await redisUnreachable();
  if (unreachable === null || process.env.CI === 'true') return true;
  console.warn(`\n*** Redis at ${REDIS_URL} unreachable (${unreachable}): ${name} NOT RUN ***\n`);
  return false;
}

/** Deletes every key under a prefix (SCAN, never KEYS): the "wipe Redis" of a rebuild. */
export async function wipePrefix(prefix: string, url = REDIS_URL): Promise<number> {
  const client = new Redis(url, { maxRetriesPerRequest: 1 });
  let deleted = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) deleted += await client.del(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
  return deleted;
}
