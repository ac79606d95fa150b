import { pino } from 'pino';
import { loadConfig } from '../contracts/config.ts';
import type { Plan } from '../contracts/events.ts';
import { type IssuedKey, issueKey } from '../services/keys/key-commands.ts';
import { type RunningService, startService } from '../services/service.ts';

/**
 * Issues an API key on a started service and waits until its keyed channel has folded it, so
 * the next request with the key is served as that key, not refused as unknown.
 */
export async function issueServiceKey(
  service: RunningService,
  options: { plan: Plan; owner: string },
): Promise<IssuedKey> {
  const issued = await issueKey(service.adapters.eventStore, { ...options, via: 'operator' });
  const keyed = service.components.find((c) => c.name === 'keyed-channel') as unknown as {
    registry: { waitFor(position: number): Promise<void> };
  };
  await keyed.registry.waitFor(issued.position);
  return issued;
}

/** The api role on in-process adapters and the replay feed, on a random loopback port. */
export function startApiOnly(env: Record<string, string> = {}): Promise<RunningService> {
  return startService(
    loadConfig({
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      EVENT_STORE: 'memory',
      CACHE: 'memory',
      FEED: 'replay',
      HOST: '127.0.0.1',
      PORT: '0',
      ...env,
    }),
    ['api'],
    pino({ level: 'silent' }),
  );
}
