import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  launchNatsServer,
  NATS_SERVER_BIN,
  type PrivateNatsServer,
  requireNatsBinary,
  startNatsServer,
} from '../../test/nats-server.ts';
import { freePort } from '../../test/ports.ts';
import { sleep } from './contract.ts';
import { connectNatsBus, type NatsBus } from './nats.ts';
import type { BusHealth } from './port.ts';

const haveBinary = requireNatsBinary('the bus health test');
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/** health() until it answers `ok` as wanted (each call may itself wait for the server). */
async function healthUntil(bus: NatsBus, ok: boolean): Promise<BusHealth> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const health = await bus.health();
    if (health.ok === ok || Date.now() > deadline) return health;
    await sleep(50);
  }
}

/**
 * What the `bus` check of /readyz says while nats-server is down: that the connection is lost,
 * since when and from which server. Before, the check sent a stream-info request that no server
 * could answer and /readyz, bounding every check at 2 s, showed `no answer within 2000 ms` (the
 * request's own timeout gave `TIMEOUT`), naming neither NATS nor what to look at.
 */
describe.skipIf(!haveBinary)('the NATS bus health while its server is down', () => {
  let server: PrivateNatsServer;
  let bus: NatsBus | null = null;

  beforeAll(async () => {
    server = await startNatsServer();
  });

  afterAll(async () => {
    await bus?.close();
    await server?.dispose();
  });

  it('says the connection is lost, at once, and is ready again once the server is back', async () => {
    // A request timeout far above /readyz's 2 s bound: only a health() that does not ask the
    // server can say what is wrong within it.
    bus = await connectNatsBus({
      url: server.url,
      stream: `HEALTH_${randomUUID().slice(0, 8)}`,
      subjectPrefix: `health${randomUUID().slice(0, 8)}`,
      logger,
      requestTimeoutMs: 10_000,
    });
    expect((await bus.health()).ok).toBe(true);

    await server.kill('SIGKILL');
    const down = await healthUntil(bus, false);
    expect(down.ok).toBe(false);
    expect(down.detail).toMatch(
      new RegExp(
        `^not connected to NATS since \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z \\(lost 127\\.0\\.0\\.1:${server.port}\\); ` +
          'reconnecting to the servers of NATS_URL every 0\\.5 s: is nats-server running and reachable\\?$',
      ),
    );

    await server.restart();
    const up = await healthUntil(bus, true);
    expect(up).toMatchObject({ ok: true, replicas: { wanted: 1, current: 1 } });
  });
});

/**
 * A start that fails at once (nothing an outage explains) names NATS, its address (password
 * masked) and NATS_URL with what to correct. Before, the fatal line read only the driver's words:
 * `failed to start: getaddrinfo ENOTFOUND natz.invalid`, `failed to start: Authorization Violation`.
 */
describe.skipIf(!haveBinary)('a NATS start refused at once', () => {
  it('names NATS_URL and its host when the host name does not resolve', async () => {
    const failure = await connectNatsBus({
      // .invalid never resolves (RFC 6761); a resolver that does not answer at all (EAI_AGAIN) is
      // waited out, so the startup timeout is short.
      url: 'nats://natz.invalid:4222',
      stream: 'NOPE',
      logger,
      startupTimeoutMs: 1_000,
    }).then(
      () => null,
      (err: unknown) => err as Error,
    );
    expect(failure?.message).toMatch(/^NATS at nats:\/\/natz\.invalid:4222 /);
    expect(failure?.message).toContain('natz.invalid');
    if (/ENOTFOUND/.test(failure?.message ?? ''))
      expect(failure?.message).toMatch(
        /\(NATS_URL\) cannot be used: .*: its host name does not resolve; correct NATS_URL's host$/,
      );
  });

  it('names NATS_URL and the login when the server refuses it', async () => {
    const port = await freePort();
    const server = await launchNatsServer(
      NATS_SERVER_BIN,
      ['-a', '127.0.0.1', '-p', String(port), '--user', 'signal', '--pass', 'right-one'],
      20_000,
    );
    try {
      const failure = await connectNatsBus({
        url: `nats://signal:wrong-one@127.0.0.1:${port}`,
        stream: 'NOPE',
        logger,
        startupTimeoutMs: 60_000,
      }).then(
        () => null,
        (err: unknown) => err as Error,
      );
      expect(failure?.message).toBe(
        `NATS at nats://signal:***@127.0.0.1:${port} (NATS_URL) cannot be used: AuthorizationError: Authorization Violation: ` +
          'the server refused the login; put its user and password in NATS_URL (nats://user:password@host:4222)',
      );
    } finally {
      server.kill('SIGKILL');
    }
  });
});
