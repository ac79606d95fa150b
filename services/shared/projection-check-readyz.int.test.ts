import { describe, expect, it, vi } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { altnameError, PRIVATE_WORDS, readyzApp } from '../../test/readyz-app.ts';
import { projectionCheck } from './projection-check.ts';
import { Readiness } from './readiness.ts';

describe('a projection runner stopped by an error, as /readyz shows it', () => {
  it("shows the error's reason, never the bare host its words name; the log has the words", async () => {
    const altname = altnameError();
    const store = new MemoryEventStore();
    await store.append('s', [{ type: 'Ok', data: {} }]);
    const failing: Projection<number> = {
      name: 'failing',
      version: 1,
      initial: () => 0,
      evolve() {
        throw altname;
      },
    };
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), failing);
    await runner.start();
    await vi.waitFor(() => expect(runner.error).not.toBeNull());

    const readiness = new Readiness();
    readiness.add('projection:failing', projectionCheck(runner));
    const { app, logged } = await readyzApp(readiness);
    try {
      const res = await app.inject({ method: 'GET', url: '/readyz' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({
        status: 'not_ready',
        checks: {
          'projection:failing': {
            ok: false,
            detail: 'TLS certificate refused (the full error is in the service log)',
            checkpoint: 0,
          },
        },
      });
      for (const word of PRIVATE_WORDS) expect(res.body).not.toContain(word);
      expect(logged()).toHaveLength(1);
      expect(logged()[0]).toMatchObject({ check: 'projection:failing', err: { message: altname.message } });
    } finally {
      await app.close();
      await runner.stop();
    }
  });
});
