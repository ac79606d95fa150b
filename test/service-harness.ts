import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../contracts/config.ts';
import type { Role } from '../services/component.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { type RunningService, startService } from '../services/service.ts';

export interface TestService {
  service: RunningService;
  /** A live key of `plan`, already folded into the key registry. */
  issue(plan?: 'free' | 'pro'): Promise<string>;
  stop(): Promise<void>;
}

/**
 * The service with the given roles on the embedded defaults (LMDB in a fresh directory, the
 * replayed market, an ephemeral port), without the request-rate limiter.
 */
export async function startTestService(
  roles: Role[],
  env: Record<string, string> = {},
): Promise<TestService> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-'));
  const config = loadConfig({
    DATA_DIR: dir,
    PORT: '0',
    HOST: '127.0.0.1',
    FEED: 'replay',
    LOG_LEVEL: 'silent',
    RATE_LIMIT_ENABLED: 'false',
    ...env,
  });
  const service = await startService(config, roles, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
  const channel = service.components.find((c) => c.name === 'keyed-channel') as unknown as {
    registry: { waitFor(position: number): Promise<void> };
  };
  return {
    service,
    async issue(plan = 'pro') {
      const issued = await issueKey(service.adapters.eventStore, { plan, owner: 'test', via: 'operator' });
      await channel.registry.waitFor(issued.position);
      return issued.key;
    },
    async stop() {
      await service.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
