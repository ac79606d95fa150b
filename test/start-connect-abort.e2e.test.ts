import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { type ServiceProcess as Run, runServiceProcess as run } from './service-process.ts';
import { silentServer } from './silent-server.ts';

const running: Run[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) r.child.kill('SIGKILL');
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** The stop's own bound (SHUTDOWN_TIMEOUT_MS): room for a stop on a loaded machine. */
const STOP_BOUND_MS = 20_000;
/** The remote facilitator's bound on its answer (X402_FACILITATOR_TIMEOUT_MS): far past the stop's. */
const FACILITATOR_BOUND_MS = 600_000;

/**
 * PostgreSQL's login answered (AuthenticationOk, ReadyForQuery) and nothing after it: the start's
 * first statement, its migration's, waits for an answer with no bound of its own (as one behind
 * another replica's migration lock does), where the first connection's is 2 s.
 */
function answerPostgresLogin(socket: Socket): void {
  socket.once('data', () => {
    const ok = Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 0]);
    const ready = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);
    socket.write(Buffer.concat([ok, ready]));
  });
}

/**
 * A signal while the start waits for an answer from Redis, PostgreSQL, KurrentDB or a remote x402
 * facilitator ends that wait, as it ends a wait for NATS (process e2e). The waits of PostgreSQL,
 * KurrentDB and the facilitator outlast the stop's bound (STOP_BOUND_MS) many times over, so a
 * start that waited one out ends in `shutdown timed out` and a SIGKILL, not in exit 0; Redis's
 * first connection gives up after 2 s and reports an outage (an error line), which a wait the
 * stop ended does not.
 */
describe('a signal while the service waits at start for a server that does not answer', () => {
  it.each([
    ['Redis', (port: number) => ({ CACHE: 'redis', REDIS_URL: `redis://127.0.0.1:${port}` }), undefined],
    [
      'PostgreSQL',
      (port: number) => ({
        EVENT_STORE: 'postgres',
        POSTGRES_URL: `postgres://signal@127.0.0.1:${port}/signals`,
      }),
      answerPostgresLogin,
    ],
    [
      'KurrentDB',
      (port: number) => ({
        EVENT_STORE: 'kurrentdb',
        // The client's own bounds (10 discovery attempts, a keep-alive answered within 10 s) lifted.
        KURRENTDB_URL: `kurrentdb://127.0.0.1:${port}?tls=false&maxDiscoverAttempts=100000&keepAliveInterval=-1`,
      }),
      undefined,
    ],
    // Asked which payments it settles (`/supported`) while pay-per-call is built.
    [
      'the x402 facilitator',
      (port: number) => ({
        X402_FACILITATOR: 'remote',
        X402_FACILITATOR_URL: `http://127.0.0.1:${port}`,
        X402_FACILITATOR_TIMEOUT_MS: String(FACILITATOR_BOUND_MS),
        X402_RECONCILE_AFTER_MS: String(2 * FACILITATOR_BOUND_MS),
      }),
      undefined,
    ],
  ] as const)(
    'on SIGTERM while it waits for %s, ends the wait, says so in one stop line and exits 0',
    async (_name, settings, answer) => {
      // A port that takes the connection and never answers (PostgreSQL's: past its login).
      const silent = await silentServer(answer);
      const { port, sockets } = silent;
      try {
        const dataDir = await mkdtemp(join(tmpdir(), 'start-abort-'));
        dirs.push(dataDir);
        const r = run({
          DATA_DIR: dataDir,
          SHUTDOWN_DRAIN_MS: '0',
          SHUTDOWN_TIMEOUT_MS: String(STOP_BOUND_MS),
          ...settings(port),
        });
        running.push(r);
        // The connection is made and waits for the server's answer.
        await expect.poll(() => sockets.length > 0, { interval: 50 }).toBe(true);
        r.child.kill('SIGTERM');
        // Its lines in the message: a stop that timed out says what it waited on.
        expect(await r.exit, JSON.stringify(r.lines)).toBe(0);
        expect(r.lines.some((l) => l.msg === 'service started')).toBe(false);
        // No warning or error: the wait's end is the stop's doing, not an outage to report.
        expect(r.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
        expect(r.lines.find((l) => l.msg === 'shutting down')).toMatchObject({
          signal: 'SIGTERM',
          during: 'start',
        });
        const stopped = r.lines.filter((l) => l.msg === 'service stopped');
        expect(stopped).toEqual([expect.objectContaining({ level: 30, signal: 'SIGTERM', during: 'start' })]);
        // Its data directory is left as a stopped service leaves it: no lock, and beside Redis the
        // LMDB log it opened opens again.
        expect(existsSync(join(dataDir, 'service.pid'))).toBe(false);
        if (existsSync(join(dataDir, 'events')))
          await (await openLmdbEventStore({ path: join(dataDir, 'events') })).close();
      } finally {
        await silent.close();
      }
    },
    90_000,
  );
});

/**
 * FEED=auto asks at start whether a live venue's API answers, for up to FEED_PROBE_TIMEOUT_MS: here
 * every venue is the test's server, which takes the connection and never answers, and the probe's
 * bound (60 s) outlasts the stop's (STOP_BOUND_MS), so a start that waited the probe out ends in
 * `shutdown timed out` and a SIGKILL, not in exit 0.
 */
describe("a signal while FEED=auto's probe waits for a venue that does not answer", () => {
  it('ends the probe, says so in one stop line and exits 0', async () => {
    const silent = await silentServer();
    const { port, sockets } = silent;
    try {
      const dataDir = await mkdtemp(join(tmpdir(), 'start-abort-'));
      dirs.push(dataDir);
      const r = run({
        DATA_DIR: dataDir,
        SHUTDOWN_DRAIN_MS: '0',
        SHUTDOWN_TIMEOUT_MS: String(STOP_BOUND_MS),
        FEED: 'auto',
        FEED_PROBE_TIMEOUT_MS: '60000',
        NODE_OPTIONS: `--import ${new URL('./venues-at.mjs', import.meta.url).pathname}`,
        VENUES_AT: `http://127.0.0.1:${port}`,
      });
      running.push(r);
      await expect.poll(() => sockets.length > 0, { interval: 50, timeout: 60_000 }).toBe(true);
      r.child.kill('SIGTERM');
      expect(await r.exit, JSON.stringify(r.lines)).toBe(0);
      expect(r.lines.some((l) => l.msg === 'service started' || l.msg === 'market feed selected')).toBe(
        false,
      );
      expect(r.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
      const stopped = r.lines.filter((l) => l.msg === 'service stopped');
      expect(stopped).toEqual([expect.objectContaining({ level: 30, signal: 'SIGTERM', during: 'start' })]);
      expect(existsSync(join(dataDir, 'service.pid'))).toBe(false);
    } finally {
      await silent.close();
    }
  }, 90_000);
});
