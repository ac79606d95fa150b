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

/**
 * A projection store that fails to load or to save a projection on request (the latest-verdicts
 * one unless `name` says another).
 */
function projections(fail: { load?: boolean; save?: boolean; name?: string }) {
  const store = new MemoryProjectionStore();
  const load = store.load.bind(store);
  const save = store.save.bind(store);
  store.load = async (name) => {
    if (fail.load && name === (fail.name ?? 'latest-verdicts')) throw new Error('snapshot unreadable');
    return load(name);
  };
  store.save = async (name, snapshot) => {
    if (fail.save && name === (fail.name ?? 'latest-verdicts')) throw new Error('snapshot unwritable');
    return save(name, snapshot);
  };
  return store;
}

function slice(
  fail: { load?: boolean; save?: boolean; name?: string },
  roles: ('api' | 'dispatcher')[] = ['api', 'dispatcher'],
) {
  const eventStore = new MemoryEventStore();
  const bus = new MemoryBus();
  const projectionStore = projections(fail);
  const built = webhooksSlice({
    config,
    adapters: { eventStore, projectionStore, bus },
    logger,
    roles,
    feed,
  });
  return { built, eventStore, bus, projectionStore };
}

/** A subscription created on `eventStore`, folded by every runner on it: stopping has a snapshot to save. */
async function somethingToFold(eventStore: MemoryEventStore): Promise<number> {
  const { position } = await createSubscription(eventStore, {
    keyId: 'key_a',
    request: { url: 'https://hooks.example.com/a', events: ['trade_call'] } as never,
    url: 'https://hooks.example.com/a',
    secrets: new SecretBox('11'.repeat(32)),
    maxPerKey: 5,
  });
  for (const runner of runnersOn(eventStore)) await runner.waitFor(position);
  return position;
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

  it("runs the dispatcher part's later stop steps when an earlier one throws, rethrowing that failure", async () => {
    // A dispatcher-only process: the part owns its webhook projection, whose snapshot cannot be
    // written; the latest-verdicts runner is stopped after it.
    const { built, eventStore, bus, projectionStore } = slice({ save: true, name: 'webhooks' }, [
      'dispatcher',
    ]);
    await built.start();
    const position = await somethingToFold(eventStore);
    expect(
      runnersOn(eventStore)
        .map((r) => r.name)
        .sort(),
    ).toEqual(['latest-verdicts', 'webhooks']);
    await expect(built.stop()).rejects.toThrow('snapshot unwritable');
    // The later step ran: the latest-verdicts runner left the log and saved its snapshot.
    expect(runnersOn(eventStore).map((r) => r.name)).toEqual([]);
    expect((await projectionStore.load('latest-verdicts'))?.checkpoint).toBe(position);
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
