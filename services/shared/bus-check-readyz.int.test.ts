import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it, onTestFinished } from 'vitest';
import { connectNatsBus } from '../../adapters/bus/nats.ts';
import { requireNatsBinary, startNatsServer } from '../../test/nats-server.ts';
import { readyzApp } from '../../test/readyz-app.ts';
import { Readiness } from './readiness.ts';

const run = requireNatsBinary('the bus check on /readyz');

describe.runIf(run)("the bus check on /readyz, once the NATS server has lost the bus's stream", () => {
  it("says 'stream not found', the JetStream API's words, not the 404 status it answers with", async () => {
    // A private server: its stream is deleted under a connected bus, as a server that came back
    // without its store has none (the relay's next publish makes it again).
    const server = await startNatsServer();
    onTestFinished(() => server.dispose());
    const stream = `READYZ_${process.pid}`;
    const bus = await connectNatsBus({
      url: server.url,
      stream,
      subjectPrefix: 'readyz',
      startupTimeoutMs: 10_000,
    });
    onTestFinished(() => bus.close());
    const nc = await connect({ servers: server.url });
    onTestFinished(() => nc.close());
    await (await jetstreamManager(nc)).streams.delete(stream);

    const readiness = new Readiness();
    readiness.add('bus', async () => ({ kind: bus.kind, ...(await bus.health()) }));
    const { app, logged } = await readyzApp(readiness);
    onTestFinished(() => app.close());
    const res = await app.inject({ method: 'GET', url: '/readyz' });
    expect(res.statusCode).toBe(503);
    expect(res.json().checks.bus).toEqual({
      ok: false,
      kind: 'nats',
      detail: 'stream not found (the full error is in the service log)',
    });
    // The log's full result has the error itself.
    expect(logged()).toMatchObject([{ check: 'bus', err: { message: 'stream not found' } }]);
  });
});
