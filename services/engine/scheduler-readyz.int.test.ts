import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { loadConfig } from '../../contracts/config.ts';
import { altnameError } from '../../test/readyz-app.ts';
import { engineComponent } from './component.ts';
import { SignalEngine } from './engine.ts';

describe("the engine scheduler's readiness check after a failed run", () => {
  let feed: ReplayFeed;
  afterEach(async () => {
    await feed?.close();
  });

  it('carries the error as its cause and shows only its reason', async () => {
    feed = await openReplayFeed({ run: false });
    const engine = new SignalEngine({ feed, store: new MemoryEventStore() });
    const component = engineComponent({ config: loadConfig({}), engine, logger: pino({ level: 'silent' }) });
    const check = component.checks!().scheduler!;
    expect(await check()).toMatchObject({ ok: true, lastError: null });
    expect((await check()).cause).toBeUndefined();

    // A run stopped by the store's TLS refusal, whose words name its bare host.
    const altname = altnameError();
    component.scheduler.lastFailure = altname;
    const failed = await check();
    expect(failed).toMatchObject({ ok: false, lastError: 'TLS certificate refused' });
    expect(failed.cause).toBe(altname);
  });
});
