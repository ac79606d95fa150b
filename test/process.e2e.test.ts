import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { EVENT_TYPES, newEvent } from '../contracts/events.ts';
import { holdWriteLock, type LockHolder } from './lmdb-lock-holder.ts';
import { freePortIn } from './ports.ts';
import { type ServiceProcess as Run, runServiceProcess as run } from './service-process.ts';
import { silentServer } from './silent-server.ts';

const ROOT = new URL('..', import.meta.url).pathname;

const running: Run[] = [];
const dirs: string[] = [];
const holders: LockHolder[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) r.child.kill('SIGKILL');
  for (const holder of holders.splice(0)) await holder.release();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir() {
  const dir = await mkdtemp(join(tmpdir(), 'proc-'));
  dirs.push(dir);
  return dir;
}

describe('the service process', () => {
  it('refuses a bad configuration, naming the variable', async () => {
    const r = run({ PORT: 'eighty', EVENT_STORE: 'cassandra' });
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('PORT');
    expect(r.stderr).toContain('"eighty"');
    expect(r.stderr).toContain('EVENT_STORE');
  });

  it('refuses a misspelled RELAY_EVENT_TYPES as a bad setting, listing the event types, before it opens anything', async () => {
    const dataDir = join(await tempDir(), 'data');
    const r = run({ DATA_DIR: dataDir, RELAY_EVENT_TYPES: 'VerdictRecorded,VerdictRecordd' });
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toBe(
      `invalid configuration:\n  RELAY_EVENT_TYPES: names unknown event types: VerdictRecordd; the event types are ${EVENT_TYPES.join(', ')} (got "VerdictRecorded,VerdictRecordd")\n`,
    );
    // No log line: neither the event store nor the feed was opened.
    expect(r.lines).toEqual([]);
    expect(existsSync(dataDir)).toBe(false);
  });

  it('refuses an unknown role', async () => {
    const r = run({ DATA_DIR: await tempDir() }, ['--role', 'janitor']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('unknown role "janitor"');
  });

  it('refuses the projections role on the in-process bus without the dispatcher, naming BUS', async () => {
    // Its relay would publish to no one and move the shared relay checkpoint past the events.
    const r = run({ DATA_DIR: await tempDir() }, ['--role', 'projections']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain(
      "BUS: memory carries the relay's events only to a dispatcher in the same process",
    );
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('answers --help with how to start it, as it was started, before reading a configuration it would refuse', () => {
    const start = (...args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'services/main.ts', ...args], {
        cwd: ROOT,
        env: { PATH: process.env.PATH, PORT: 'eighty' },
        encoding: 'utf8',
      });
    const usage =
      'usage: node --import tsx services/main.ts [--role <role>]...\n' +
      '  <role>: all (the default), api, engine, projections, dispatcher; repeatable or comma-separated\n';
    expect(start('--help')).toMatchObject({ status: 0, stdout: usage });
    // An argument it does not take is followed by the usage (read after the configuration, which passes here).
    const positional = spawnSync(process.execPath, ['--import', 'tsx', 'services/main.ts', 'api'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, DATA_DIR: '/nonexistent-never-made' },
      encoding: 'utf8',
    });
    expect(positional.status).toBe(1);
    expect(positional.stderr).toBe(
      `Unexpected argument 'api'. This command does not take positional arguments\n\n${usage}`,
    );
  });

  it('answers --role relay with the role that runs the relay', async () => {
    const r = run({ DATA_DIR: await tempDir() }, ['--role', 'relay']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr.trim()).toBe(
      'unknown role "relay": expected one of all, api, engine, projections, dispatcher; the relay (event store to NATS) runs in the projections role',
    );
  });

  it('refuses production without a webhook master key in one line, no stack trace', async () => {
    const r = run({ NODE_ENV: 'production', DATA_DIR: await tempDir() }, ['--role', 'dispatcher']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('WEBHOOK_MASTER_KEY');
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('refuses a malformed WEBHOOK_MASTER_KEYS_PREVIOUS in one line naming it, no stack trace', async () => {
    const r = run({ DATA_DIR: await tempDir(), WEBHOOK_MASTER_KEYS_PREVIOUS: `${'ab'.repeat(32)},nothex` }, [
      '--role',
      'dispatcher',
    ]);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr.split('\n').filter((l) => l.includes('WEBHOOK_MASTER_KEYS_PREVIOUS'))).toHaveLength(1);
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('starts on embedded defaults, folds the log, and on SIGTERM checkpoints and exits 0', async () => {
    const dataDir = await tempDir();
    const seed = await openLmdbEventStore({ path: join(dataDir, 'events') });
    for (let i = 0; i < 25; i++) {
      await seed.append(`quota-${i % 3}`, [
        newEvent('ApiKeyRevoked', { keyId: `k${i}`, reason: 'test' }),
        newEvent('ApiKeyRevoked', { keyId: `k${i}b`, reason: 'test' }),
      ]);
    }
    await seed.close();

    const r = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    running.push(r);
    // The lines as written: a key given twice is lost to JSON.parse, which keeps the last.
    let stdout = '';
    r.child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    const url = r.lines.find((l) => l.msg === 'service started')!.url as string;
    const startedLine = stdout.split('\n').find((line) => line.includes('"msg":"service started"'))!;
    expect(startedLine.match(/"roles":/g)).toHaveLength(1);
    expect(JSON.parse(startedLine).roles).toBe('api,engine,projections,dispatcher');
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    // The root README sends a newcomer to: the entry points, each of which answers.
    const index = await fetch(`${url}/`);
    expect(index.status).toBe(200);
    const { service, links } = (await index.json()) as {
      service: string;
      links: Record<string, { href: string; method: string }>;
    };
    expect(service).toBe('signal-service');
    expect(Object.keys(links)).toEqual(
      expect.arrayContaining(['docs', 'openapi', 'mcp', 'trackRecord', 'health', 'readiness']),
    );
    expect(links.mcp).toMatchObject({ href: '/mcp', method: 'POST' });
    // Served (/readyz may still say 503 while the projections catch up).
    for (const link of Object.values(links).filter((l) => l.method === 'GET'))
      expect((await fetch(`${url}${link.href}`)).status, link.href).not.toBe(404);
    await expect
      .poll(async () => {
        const body = (await (await fetch(`${url}/readyz`)).json()) as {
          checks: Record<string, { checkpoint?: number }>;
        };
        return body.checks['projection:event-stats']?.checkpoint ?? 0;
      })
      .toBeGreaterThanOrEqual(50);

    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
    const stopped = r.lines.find((l) => l.msg === 'service stopped');
    // Each stop step's milliseconds, in the order done: the listener, the slices in reverse of
    // their start, the engine, the adapters (no drain: SHUTDOWN_DRAIN_MS is 0).
    const slices = r.lines.find((l) => l.msg === 'service started')!.slices as string[];
    const stepsMs = stopped?.stepsMs as Record<string, number>;
    expect(Object.keys(stepsMs)).toEqual([
      'http',
      ...[...slices].reverse().map((name) => `slice:${name}`),
      'engine',
      'adapters',
    ]);
    for (const ms of Object.values(stepsMs)) expect(ms).toBeGreaterThanOrEqual(0);

    // Whatever the scheduler added at start, every projection drained to the head and saved it.
    const reopened = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const head = await reopened.headPosition();
    const snapshot = await reopened
      .projectionStore()
      .load<{ total: number; byType: Record<string, number> }>('event-stats');
    expect(snapshot).toMatchObject({
      checkpoint: head,
      state: { total: head, byType: { ApiKeyRevoked: 50 } },
    });
    expect((await reopened.projectionStore().load('latest-verdicts'))?.checkpoint ?? head).toBe(head);
    const relay = await reopened.projectionStore().load('relay');
    expect(relay?.checkpoint).toBeGreaterThanOrEqual(50);
    await reopened.close();
  });

  it('on SIGTERM or SIGINT while it starts, ends the start, closes what it opened, says so in one stop line and exits 0', async () => {
    // A NATS port that takes the connection and never answers: the start waits on the bus (every
    // role of `npm start` carries it) and cannot finish while the signal comes.
    const silent = await silentServer();
    const { port, sockets } = silent;
    try {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) {
        const dataDir = await tempDir();
        const before = sockets.length;
        const r = run({ DATA_DIR: dataDir, BUS: 'nats', NATS_URL: `nats://127.0.0.1:${port}` });
        running.push(r);
        await expect.poll(() => sockets.length > before, { interval: 50 }).toBe(true);
        r.child.kill(signal);
        expect(await r.exit).toBe(0);
        expect(r.lines.some((l) => l.msg === 'service started')).toBe(false);
        expect(r.lines.filter((l) => (l.level as number) >= 50)).toEqual([]);
        const stopped = r.lines.filter((l) => l.msg === 'service stopped');
        expect(stopped).toEqual([expect.objectContaining({ level: 30, signal, during: 'start' })]);
        expect(r.lines.find((l) => l.msg === 'shutting down')).toMatchObject({ signal, during: 'start' });
        // Its data directory is left as a stopped service leaves it: no lock, the log opens.
        expect(existsSync(join(dataDir, 'service.pid'))).toBe(false);
        const reopened = await openLmdbEventStore({ path: join(dataDir, 'events') });
        await reopened.close();
      }
    } finally {
      await silent.close();
    }
  });

  it('warns at start of each variable that looks meant as a setting, naming the nearest, and of no ordinary one', async () => {
    const r = run({
      DATA_DIR: await tempDir(),
      NATS_ULR: 'nats://127.0.0.1:4222',
      X402_WALLET: '0x1',
      HOME: '/nonexistent',
      CI: 'true',
    });
    running.push(r);
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    const named = r.lines.filter((l) => /is not a setting of this service/.test(String(l.msg)));
    expect(named).toEqual([
      expect.objectContaining({
        level: 40,
        variable: 'NATS_ULR',
        nearest: 'NATS_URL',
        msg: 'NATS_ULR is not a setting of this service and is ignored; the nearest setting is NATS_URL',
      }),
      expect.objectContaining({
        level: 40,
        variable: 'X402_WALLET',
        nearest: expect.stringMatching(/^X402_/),
      }),
    ]);
    // Its value is not written: it may be a secret.
    expect(JSON.stringify(named)).not.toContain('127.0.0.1:4222');
    // Every role in this one process: its CACHE=memory is shared with no other api.
    expect(r.lines.filter((l) => l.setting === 'CACHE')).toEqual([]);
    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
  });

  it('warns of CACHE=memory in an api run apart from the other roles: replicas of it would each count apart', async () => {
    const r = run({ DATA_DIR: await tempDir() }, ['--role', 'api']);
    running.push(r);
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    expect(r.lines.filter((l) => l.setting === 'CACHE')).toEqual([
      expect.objectContaining({
        level: 40,
        msg: expect.stringMatching(
          /^CACHE=memory keeps quota counters, .* set CACHE=redis \(and REDIS_URL\) on every one$/,
        ),
      }),
    ]);
    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
  });

  it('on SIGTERM beside a client that sent half a body and went quiet, cuts it off after the grace, drains and exits 0', async () => {
    const dataDir = await tempDir();
    // The grace is a third of the shutdown timeout (5 s); the request timeout (30 s) is far past both.
    // The projections' stop deadline (3/5 of it) leaves them 4 s past the grace to save on a loaded host.
    const r = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0', SHUTDOWN_TIMEOUT_MS: '15000' });
    running.push(r);
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    const url = new URL(r.lines.find((l) => l.msg === 'service started')!.url as string);
    const socket = connect(Number(url.port), url.hostname);
    await once(socket, 'connect');
    socket.on('error', () => undefined);
    socket.write(
      'POST /api/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"query":"fund',
    );
    const cut = once(socket, 'close');
    // The request is in flight (its body being read) when the signal comes.
    await new Promise((resolve) => setTimeout(resolve, 500));
    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
    await cut;
    expect(
      r.lines.some((l) => l.msg === 'requests still open after the grace: closing their connections'),
    ).toBe(true);
    // Done before the shutdown timeout (9 s), which would have logged this and exited 1.
    expect(r.lines.some((l) => l.msg === 'shutdown timed out: exiting')).toBe(false);
    expect(r.lines.some((l) => l.msg === 'service stopped')).toBe(true);
    // The projections drained to the head and saved it.
    const reopened = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const head = await reopened.headPosition();
    expect((await reopened.projectionStore().load('event-stats'))?.checkpoint).toBe(head);
    await reopened.close();
  });

  it('says in a fatal line which timer ended a stop that outran it, the step it waited on and what was open', async () => {
    const dataDir = await tempDir();
    // A timeout no stop can meet: it fires while the stop is under way, whatever the machine's load.
    const r = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0', SHUTDOWN_TIMEOUT_MS: '1' });
    running.push(r);
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    r.child.kill('SIGTERM');
    await r.exit;
    expect(r.child.signalCode).toBe('SIGKILL');
    const line = r.lines.find((l) => l.msg === 'shutdown timed out: exiting');
    expect(line).toMatchObject({
      level: 60,
      timer: 'shutdown',
      timeoutMs: 1,
      stopping: { step: expect.any(String), forMs: expect.any(Number), done: expect.any(Array) },
      open: expect.any(Object),
    });
    expect(r.lines.some((l) => l.msg === 'service stopped')).toBe(false);
  });

  it('names PORT and HOST when the system refuses its listen: a port in use, a host not of this machine', async () => {
    // A port another process holds, in this suite's block.
    const holder = createServer();
    const port = await freePortIn(19_400, 19_499);
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
    try {
      const inUse = run({ DATA_DIR: await tempDir(), PORT: String(port) });
      // 192.0.2.1 (TEST-NET-1) is never an address of this machine.
      const notHere = run({ DATA_DIR: await tempDir(), HOST: '192.0.2.1' });
      running.push(inUse, notHere);
      expect(await inUse.exit).toBe(1);
      expect(await notHere.exit).toBe(1);
      expect(inUse.lines.filter((l) => l.level === 60).map((l) => l.msg)).toEqual([
        `failed to start: cannot listen (EADDRINUSE): port ${port} on 127.0.0.1 is in use by another process: stop it, or set PORT (and HOST) to a port that is free`,
      ]);
      expect(notHere.lines.filter((l) => l.level === 60).map((l) => l.msg)).toEqual([
        'failed to start: cannot listen (EADDRNOTAVAIL): HOST 192.0.2.1 is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all',
      ]);
      for (const r of [inUse, notHere])
        expect(r.lines.find((l) => l.level === 60)!.err).not.toHaveProperty('stack');
    } finally {
      await new Promise<void>((resolve) => holder.close(() => resolve()));
    }
  });

  it('refuses a second service on the same LMDB DATA_DIR, naming it and the holder, beside which the key CLI works; a kill -9 leaves no lock behind', async () => {
    const dataDir = await tempDir();
    const first = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    running.push(first);
    await expect
      .poll(() => first.lines.find((l) => l.msg === 'service started'), { interval: 100 })
      .toBeTruthy();

    // Another role, even: it would keep quota counters and projections of its own beside the first.
    const second = run({ DATA_DIR: dataDir }, ['--role', 'api']);
    running.push(second);
    expect(await second.exit).toBe(1);
    expect(second.stderr).toContain(
      `DATA_DIR ${dataDir} is in use by another service process (pid ${first.child.pid}`,
    );
    expect(second.stderr).not.toMatch(/^\s+at /m);

    // The operator CLI appends beside the running service (LMDB is safe across processes).
    const cli = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'services/operator/cli.ts', 'create', '--plan', 'free', '--owner', 'beside'],
      { cwd: ROOT, env: { PATH: process.env.PATH, DATA_DIR: dataDir }, encoding: 'utf8' },
    );
    expect(cli.status, cli.stderr).toBe(0);

    // Killed without a chance to remove its lock file, the first does not block a restart.
    first.child.kill('SIGKILL');
    await first.exit;
    expect(existsSync(join(dataDir, 'service.pid'))).toBe(true);
    const restarted = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    running.push(restarted);
    await expect
      .poll(() => restarted.lines.find((l) => l.msg === 'service started'), { interval: 100 })
      .toBeTruthy();
    restarted.child.kill('SIGTERM');
    expect(await restarted.exit).toBe(0);
    // A clean stop removes it.
    expect(existsSync(join(dataDir, 'service.pid'))).toBe(false);
  });
});

interface Readyz {
  checks: Record<string, { ok: boolean; oldestMs?: number }>;
}

// Issue 33: a process stopped mid-write on a shared LMDB directory stalled every writer while
// /readyz said 200, and the stalled process then never ended on SIGTERM.
describe('a writer stopped while holding the LMDB write lock', () => {
  async function startEngine(dataDir: string) {
    // The engine role appends verdicts on its own as the replay clock closes candles.
    const r = run({ DATA_DIR: dataDir, APPEND_STALL_MS: '1000', SHUTDOWN_TIMEOUT_MS: '2000' }, [
      '--role',
      'engine',
    ]);
    running.push(r);
    // The bound is for a start that never comes: beside a full suite on a loaded host a start takes tens of seconds.
    await expect
      .poll(() => r.lines.find((l) => l.msg === 'service started'), { timeout: 90_000, interval: 100 })
      .toBeTruthy();
    return { r, url: r.lines.find((l) => l.msg === 'service started')!.url as string };
  }
  const readyz = async (url: string) => {
    const res = await fetch(`${url}/readyz`);
    return { status: res.status, body: (await res.json()) as Readyz };
  };

  it('turns the other writer not ready, which recovers once the stopped one is killed, and ends on SIGTERM at its timeout while stalled', async () => {
    const dataDir = await tempDir();
    const { r, url } = await startEngine(dataDir);
    // Generous bounds throughout: the machine is shared; what is asserted is the state, not speed.
    await expect.poll(async () => (await readyz(url)).status, { timeout: 30_000, interval: 200 }).toBe(200);

    const holder = await holdWriteLock(join(dataDir, 'events'));
    holders.push(holder);
    holder.child.kill('SIGSTOP');
    await expect.poll(async () => (await readyz(url)).status, { timeout: 60_000, interval: 200 }).toBe(503);
    const stalled = await readyz(url);
    expect(stalled.body.checks.appends).toMatchObject({ ok: false });
    expect(stalled.body.checks.appends!.oldestMs).toBeGreaterThan(1000);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const age = /^event_store_oldest_pending_append_seconds (\S+)$/m.exec(metrics);
    expect(Number(age?.[1])).toBeGreaterThan(1);

    await holder.release();
    await expect.poll(async () => (await readyz(url)).status, { timeout: 60_000, interval: 200 }).toBe(200);
    expect((await readyz(url)).body.checks.appends).toMatchObject({ ok: true });

    // Stalled again, then asked to stop: an append of the engine is stuck on the lock.
    const again = await holdWriteLock(join(dataDir, 'events'));
    holders.push(again);
    again.child.kill('SIGSTOP');
    await expect.poll(async () => (await readyz(url)).status, { timeout: 60_000, interval: 200 }).toBe(503);
    r.child.kill('SIGTERM');
    // Bounded only so a hang fails here rather than at the suite's timeout (it hung 16 minutes).
    const ended = await Promise.race([
      r.exit.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 60_000)),
    ]);
    expect(ended).toBe(true);
    // Ended by a SIGKILL of its own, never by an exit that can hang: either the shutdown timeout
    // fired while stop() was stuck on the append, or stop() finished and the exit's watchdog ended
    // an exit blocked on the lock. Which one, and its log line, is not asserted: with the thread
    // pool's threads blocked on the lock, the asynchronous log writes can be lost with the process
    // on a loaded machine (seen in 2 of 3 full runs beside other work).
    expect(r.child.signalCode).toBe('SIGKILL');
    await again.release();
  }, 240_000);
});
