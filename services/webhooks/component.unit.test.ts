import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import { runnersOn } from '../../projections/runner.ts';
import { webhooksSlice } from './component.ts';
import { SecretBox } from './secret-box.ts';
import { createSubscription } from './subscription-commands.ts';

const logger = pino({ level: 'silent' });
const config = loadConfig({ NODE_ENV: 'test', EVENT_STORE: 'memory', LOG_LEVEL: 'silent', BUS: 'memory' });
const feed = {
  kind: 'replay',
  now: () => Date.now(),
  markets: async () => [],
  close: async () => {},
} as unknown as MarketFeed;

/** A projection store that fails to load or to save the latest-verdicts projection on request. */
function projections(fail: { load?: boolean; save?: boolean }) {
  const store = new MemoryProjectionStore();
  const load = store.load.bind(store);
  const save = store.save.bind(store);
  store.load = async (name) => {
    if (fail.load && name === 'latest-verdicts') throw new Error('snapshot unreadable');
    return load(name);
  };
  store.save = async (name, snapshot) => {
    if (fail.save && name === 'latest-verdicts') throw new Error('snapshot unwritable');
    return save(name, snapshot);
  };
  return store;
}

function slice(fail: { load?: boolean; save?: boolean }) {
  const eventStore = new MemoryEventStore();
  const bus = new MemoryBus();
  const built = webhooksSlice({
    config,
    adapters: { eventStore, projectionStore: projections(fail), bus },
    logger,
    roles: ['api', 'dispatcher'],
    feed,
  });
  return { built, eventStore, bus };
}

describe('the webhooks slice', () => {
  it('stops the parts that started when a later part fails to start', async () => {
    const { built, eventStore, bus } = slice({ load: true });
    await expect(built.start()).rejects.toThrow('snapshot unreadable');
    // The api part's projection (shared with the dispatcher) is not left running.
    expect(runnersOn(eventStore).map((r) => r.name)).toEqual([]);
    await bus.close();
  });

  it('stops every part even when one fails to stop, and rethrows the first failure', async () => {
    const { built, eventStore, bus } = slice({ save: true });
    await built.start();
    // Something to fold, so stopping has a snapshot to save.
    const { position } = await createSubscription(eventStore, {
      keyId: 'key_a',
      request: { url: 'https://hooks.example.com/a', events: ['trade_call'] } as never,
      url: 'https://hooks.example.com/a',
      secrets: new SecretBox('11'.repeat(32)),
      maxPerKey: 5,
    });
    const running = runnersOn(eventStore);
    expect(running.length).toBeGreaterThan(0);
    for (const runner of running) await runner.waitFor(position);
    await expect(built.stop()).rejects.toThrow('snapshot unwritable');
    expect(runnersOn(eventStore).map((r) => r.name)).toEqual([]);
    await bus.close();
  });

  it('reports the dispatcher’s latest-verdicts projection on /readyz', async () => {
    const { built, bus } = slice({});
    await built.start();
    try {
      const checks = built.checks();
      expect(Object.keys(checks).sort()).toEqual([
        'projection:dispatcher-latest-verdicts',
        'projection:webhooks',
        'projection:webhooks-api',
        'webhookSecrets',
      ]);
      expect(await checks['projection:dispatcher-latest-verdicts']!()).toMatchObject({ ok: true });
    } finally {
      await built.stop();
      await bus.close();
    }
  });
});
