import { performance } from 'node:perf_hooks';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { stopRunnersBy } from '../../projections/runner.ts';
import {
  dropSchemas,
  shouldRunPostgresSuite,
  silenceableRelay,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { PaymentReconciler } from './reconcile.ts';

const run = await shouldRunPostgresSuite('the payment reconciler stopping under a silent PostgreSQL');
const schemas: string[] = [];
afterAll(() => dropSchemas(schemas));

/**
 * The api role's stop waits for the payments slice, whose reconciler waits for its round in flight.
 * A round reads the log (the open payments' catch-up up to the head, up to 60 s); with PostgreSQL
 * silent (a partition, a hung server) that read never answers, and the stop outlasted
 * SHUTDOWN_TIMEOUT_MS ('shutdown timed out', stopping slice:payments). The shutdown's stop deadline
 * bounds that wait as it bounds every projection runner's.
 */
describe.runIf(run)('the payment reconciler under a silent PostgreSQL', () => {
  it('stops by the stop deadline with a round in flight, and says it left the round', async () => {
    const relay = await silenceableRelay();
    const schema = uniqueSchema('reconcile_stop');
    schemas.push(schema);
    const store = await openPostgresEventStore({ url: relay.url, schema });
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const reconciler = new PaymentReconciler({ store, chains: new Map(), olderThanMs: 0, logger });
    try {
      relay.silence();
      reconciler.start(60_000);
      // The first round is started at once; its catch-up reads the head of a log that does not answer.
      await new Promise((resolve) => setTimeout(resolve, 200));
      stopRunnersBy(store, performance.now() + 500);
      await reconciler.stop();
      expect(
        lines.map((l) => l.msg),
        JSON.stringify(lines),
      ).toContain(
        'payment reconciliation round left in flight at the stop deadline: the next start runs it again',
      );
    } finally {
      await relay.close();
      await store.close().catch(() => undefined);
    }
  }, 30_000);
});
