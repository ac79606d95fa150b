import { describe, expect, it } from 'vitest';
import { createMetrics } from './metrics.ts';

// Generous: the bound is SOURCE_TIMEOUT_MS (1 s); only a scrape that waits for a hanging source
// (as it did, for the whole of a 30 s cut) gets near it.
const scrape = (metrics: ReturnType<typeof createMetrics>) =>
  Promise.race([
    metrics.registry.metrics(),
    new Promise<string>((_, reject) => setTimeout(() => reject(new Error('the scrape hangs')), 30_000)),
  ]);

describe('/metrics with a gauge source that does not answer', () => {
  it('leaves that source out of the scrape and serves every other series', async () => {
    const metrics = createMetrics();
    // The projection lags read the store: on a host cut off from PostgreSQL the read hangs.
    metrics.projectionLag.from(() => new Promise<void>(() => undefined));
    metrics.appendsPending.from((set) => set({}, 3));
    metrics.oldestPendingAppend.from((set) => set({}, 7.5));
    const text = await scrape(metrics);
    expect(text).toMatch(/^event_store_appends_pending 3$/m);
    expect(text).toMatch(/^event_store_oldest_pending_append_seconds 7.5$/m);
    expect(text).not.toMatch(/^projection_lag_events\{/m);
  });

  it('takes no value a late source sets after the scrape moved on', async () => {
    const metrics = createMetrics();
    let late: ((v: number) => void) | null = null;
    metrics.projectionLag.from(
      (set) =>
        new Promise<void>((resolve) => {
          late = (v) => {
            set({ projection: 'keys' }, v);
            resolve();
          };
        }),
    );
    const first = await scrape(metrics);
    expect(first).not.toMatch(/^projection_lag_events\{/m);
    late!(42);
    metrics.projectionLag.from((set) => set({ projection: 'webhooks' }, 1));
    const second = await scrape(metrics);
    expect(second).not.toMatch(/projection="keys"/);
  });
});
