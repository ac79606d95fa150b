/**
 * Fault-injection run of the distributed layout on one host (issue 13): a private nats-server
 * (JetStream, own port and store) and a private redis-server (own port, no persistence), with
 * the projections, engine and dispatcher roles and two api replicas as separate processes on
 * one LMDB event log (each role keeps its projection snapshots in its own directory, as in the
 * deployment). Under load — keyed calls on a pro key across both replicas, anonymous quotes,
 * hostile input (oversized bodies, trickled bodies, MCP sessions opened in a loop) — it kills
 * each role, then NATS, then Redis, with SIGKILL and restarts them, and checks:
 *
 *   - no process exited except the ones it killed;
 *   - no event id appears twice on the log;
 *   - per key, calls answered 200 == units debited on the log (QuotaDebitsRecorded batches and
 *     leases less QuotaDebitsReturned, and QuotaDebited of older logs; calls in flight on a killed
 *     replica, and the lease it held for the key, may be debited without an answer);
 *   - a free key's 100 calls a day hold across both replicas (300 concurrent calls);
 *   - right after Redis lost its data, the counters equal the log;
 *   - no hourly candle without its scheduled verdict, across the engine's restart.
 *
 * An operator's diagnostic, not a test: it takes a few minutes of a machine.
 *
 *   npx tsx scripts/fault-run.ts [--seconds-between=6] [--replay-speed=1800] [--keep]
 *
 * --seconds-between: load time between two faults; --replay-speed: feed ms per wall ms (1800 =
 * an hourly candle every 2 s, so an engine restart misses several); --keep: keep the work
 * directory (the event log and one log file per role) for a look afterwards.
 *
 * Exit code 0 when every check passed, 1 otherwise; the summary is printed as text and JSON.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream, rmSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { hashApiKey } from '../services/keys/key-material.ts';
import { debitedUnits } from '../services/metering/quota-projection.ts';
import { MCP_HEADERS, mcpInitialize } from '../test/mcp-wire.ts';
import { startNatsServer } from '../test/nats-server.ts';
import { freePort } from '../test/ports.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const TIMEFRAME_MS: Record<string, number> = {
  '5m': 300_000,
  '15m': 900_000,
  '1h': 3_600_000,
  '4h': 14_400_000,
  '1d': 86_400_000,
};

const { values: args } = parseArgs({
  options: {
    'seconds-between': { type: 'string', default: '6' },
    /** A starting role fails only when its /readyz has not moved for this long (or it exits). */
    'start-stall-seconds': { type: 'string', default: '60' },
    'replay-speed': { type: 'string', default: '1800' },
    keep: { type: 'boolean', default: false },
  },
});
const BETWEEN_MS = Number(args['seconds-between']) * 1000;
/** QUOTA_LEASE_MAX_UNITS of the apis: what a killed one may leave charged per key (one lease a key). */
const LEASE_MAX_UNITS = 64;
const START_STALL_MS = Number(args['start-stall-seconds']) * 1000;

/**
 * Every child this run started, killed on any way out: a failed start, a thrown error, Ctrl-C
 * or SIGTERM. A failure used to leave NATS, Redis and the roles running.
 */
const children = new Set<ChildProcess>();
function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}
function killChildren(): void {
  for (const c of children) c.kill('SIGKILL');
}
process.once('exit', killChildren);
/** Directories to remove when a signal ends the run (no time for the async way). */
const scratchDirs: string[] = [];
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    killChildren();
    if (!args.keep) for (const d of scratchDirs) rmSync(d, { recursive: true, force: true });
    process.exit(130);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const started = Date.now();
const say = (line: string) =>
  process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}\n`);

// ---------------------------------------------------------------------------------------------
// Processes

interface Proc {
  name: string;
  start(): Promise<void>;
  kill(): Promise<void>;
  /** Exits nobody asked for: code/signal and the end of its log. */
  crashes: string[];
  pid(): number | undefined;
}

async function startRedis(dir: string): Promise<Proc & { url: string }> {
  const port = await freePort();
  let child: ChildProcess | null = null;
  let expected = false;
  const proc: Proc & { url: string } = {
    name: 'redis',
    url: `redis://127.0.0.1:${port}`,
    crashes: [],
    pid: () => child?.pid,
    async start() {
      expected = false;
      // No persistence: a restart comes back empty, the loss this run is about.
      const c = track(
        spawn(
          'redis-server',
          ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        ),
      );
      child = c;
      let log = '';
      c.stdout!.on('data', (b: Buffer) => {
        log += b.toString();
      });
      c.once('exit', (code, signal) => {
        if (!expected) proc.crashes.push(`redis exited ${code ?? signal}: ${log.slice(-500)}`);
      });
      const deadline = Date.now() + 10_000;
      while (!log.includes('Ready to accept connections')) {
        if (Date.now() > deadline) throw new Error(`redis-server did not start: ${log}`);
        await sleep(50);
      }
    },
    async kill() {
      expected = true;
      await sigkill(child);
    },
  };
  await proc.start();
  return proc;
}

interface Role extends Proc {
  port: number;
  url: string;
  logFile: string;
  /** SIGTERM, and wait: a clean stop must exit 0. */
  stop(): Promise<void>;
}

async function role(name: string, roles: string, env: Record<string, string>, dir: string): Promise<Role> {
  const port = await freePort();
  const dataDir = join(dir, name);
  await mkdir(dataDir, { recursive: true });
  // One event log for all: each role's DATA_DIR links to it; projection snapshots stay local.
  await symlink(join(dir, 'events'), join(dataDir, 'events'));
  const logFile = join(dir, `${name}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  let child: ChildProcess | null = null;
  let expected = false;
  let stopping = false;
  const r: Role = {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    logFile,
    crashes: [],
    pid: () => child?.pid,
    async start() {
      expected = false;
      const c = track(
        spawn(process.execPath, ['--import', 'tsx', 'services/main.ts', '--role', roles], {
          cwd: ROOT,
          env: { PATH: process.env.PATH, ...env, PORT: String(port), DATA_DIR: dataDir },
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      child = c;
      c.stdout!.pipe(log, { end: false });
      c.stderr!.pipe(log, { end: false });
      c.once('exit', (code, signal) => {
        if (expected || (stopping && code === 0)) return;
        r.crashes.push(
          stopping ? `${name} did not stop cleanly: ${code ?? signal}` : `${name} exited ${code ?? signal}`,
        );
      });
      // Up is ready (/readyz 200), however long that takes while it makes progress: a role
      // rebuilding a large projection is slow, not stuck. It fails when it exits, or when its
      // readiness (checks, checkpoints, lags) has not changed for START_STALL_MS.
      let last = '';
      let movedAt = Date.now();
      for (;;) {
        if (c.exitCode !== null || c.signalCode !== null)
          throw new Error(`${name} exited at start (see ${logFile})`);
        try {
          const res = await fetch(`${r.url}/readyz`, { signal: AbortSignal.timeout(5_000) });
          if (res.status === 200) return;
          const body = await res.text();
          if (body !== last) {
            last = body;
            movedAt = Date.now();
          }
        } catch {
          // not listening yet, or no answer: not progress
        }
        if (Date.now() - movedAt > START_STALL_MS) {
          throw new Error(
            `${name} not ready and no change in /readyz for ${START_STALL_MS / 1000} s: ${last || 'no answer'} (see ${logFile})`,
          );
        }
        await sleep(200);
      }
    },
    async kill() {
      expected = true;
      await sigkill(child);
    },
    async stop() {
      stopping = true;
      const c = child;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const exited = once(c, 'exit');
      c.kill('SIGTERM');
      const timer = setTimeout(() => c.kill('SIGKILL'), 25_000);
      await exited;
      clearTimeout(timer);
    },
  };
  return r;
}

async function rssMb(pid: number | undefined): Promise<number> {
  if (pid === undefined) return 0;
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    return Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024);
  } catch {
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Load

interface Tally {
  ok: number;
  byStatus: Record<string, number>;
  /** Connection errors and timeouts (a replica down, or killed with the call in flight). */
  failed: number;
}
const tally = (): Tally => ({ ok: 0, byStatus: {}, failed: 0 });

async function call(
  url: string,
  key: string | null,
  t: Tally,
): Promise<{ status: number; body: Record<string, unknown> } | null> {
  try {
    const res = await fetch(`${url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify({ coin: 'BTC' }),
      signal: AbortSignal.timeout(10_000),
    });
    const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
    t.byStatus[res.status] = (t.byStatus[res.status] ?? 0) + 1;
    if (res.status === 200) t.ok++;
    return { status: res.status, body };
  } catch {
    t.failed++;
    return null;
  }
}

/** A request whose body trickles in a byte a second: how long the server keeps it open. */
function slowBody(port: number): Promise<number> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const socket = netConnect(port, '127.0.0.1', () => {
      socket.write(
        'POST /x402/get_market_regime HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n',
      );
    });
    const timer = setInterval(() => socket.writable && socket.write('{'), 1_000);
    const done = () => {
      clearInterval(timer);
      socket.destroy();
      resolve(Date.now() - t0);
    };
    socket.on('close', done);
    socket.on('error', done);
    socket.setTimeout(120_000, done);
  });
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'fault-run-'));
  say(`work directory ${dir}`);
  scratchDirs.push(dir);
  const nats = await startNatsServer();
  scratchDirs.push(nats.storeDir);
  cleanups.push(() => nats.dispose());
  const redis = await startRedis(dir);
  say(`private nats ${nats.url}, private redis ${redis.url}`);

  // Keys first, on the log every role will read.
  await mkdir(join(dir, 'events'), { recursive: true });
  const seed = await openLmdbEventStore({ path: join(dir, 'events') });
  const pro = await issueKey(seed, { plan: 'pro', owner: 'fault-run', via: 'operator' });
  const free = await issueKey(seed, { plan: 'free', owner: 'fault-run', via: 'operator' });
  await seed.close();

  const stream = `FAULT_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const env: Record<string, string> = {
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    BUS: 'nats',
    NATS_URL: nats.url,
    NATS_STREAM: stream,
    NATS_SUBJECT_PREFIX: stream.toLowerCase(),
    CACHE: 'redis',
    REDIS_URL: redis.url,
    REDIS_PREFIX: 'fault:',
    FEED: 'replay',
    REPLAY_SPEED: String(args['replay-speed']),
    SCHEDULE_TIMEFRAMES: '1h',
    SCHEDULE_TOP_N: '3',
    REQUEST_TIMEOUT_MS: '5000',
    MCP_MAX_SESSIONS: '2000',
    QUOTA_LEASE_MAX_UNITS: String(LEASE_MAX_UNITS),
  };
  const roles = [
    await role('projections', 'projections', env, dir),
    await role('engine', 'engine', env, dir),
    await role('dispatcher', 'dispatcher', env, dir),
    await role('api-1', 'api', env, dir),
    await role('api-2', 'api', env, dir),
  ];
  for (const r of roles) {
    await r.start();
    say(`${r.name} up on ${r.url}`);
  }
  const apis = roles.filter((r) => r.name.startsWith('api'));

  // --- load ---------------------------------------------------------------------------------
  let running = true;
  let paused = false;
  const proTally = tally();
  const anonTally = tally();
  const hostile = {
    huge: {} as Record<string, number>,
    slowMs: [] as number[],
    sessions: {} as Record<string, number>,
    sessionAttempts: 0,
  };
  let maxApiRss = 0;
  const loops: Promise<void>[] = [];
  let turn = 0;
  for (let w = 0; w < 4; w++) {
    loops.push(
      (async () => {
        while (running) {
          if (paused) {
            await sleep(50);
            continue;
          }
          await call(apis[turn++ % 2]!.url, pro.key, proTally);
          await sleep(25);
        }
      })(),
    );
  }
  for (let w = 0; w < 2; w++) {
    loops.push(
      (async () => {
        while (running) {
          await call(apis[turn++ % 2]!.url, null, anonTally);
          await sleep(10);
        }
      })(),
    );
  }
  loops.push(
    (async () => {
      const huge = 'x'.repeat(8 * 1024 * 1024);
      while (running) {
        for (const api of apis) {
          try {
            const res = await fetch(`${api.url}/x402/get_market_regime`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: huge,
              signal: AbortSignal.timeout(10_000),
            });
            await res.arrayBuffer();
            hostile.huge[res.status] = (hostile.huge[res.status] ?? 0) + 1;
          } catch {
            hostile.huge.failed = (hostile.huge.failed ?? 0) + 1;
          }
        }
        await sleep(2_000);
      }
    })(),
  );
  loops.push(
    (async () => {
      while (running) {
        const lasted = await Promise.all(apis.map((api) => slowBody(api.port)));
        hostile.slowMs.push(...lasted);
      }
    })(),
  );
  loops.push(
    (async () => {
      while (running) {
        const api = apis[hostile.sessionAttempts++ % 2]!;
        try {
          const res = await fetch(`${api.url}/mcp`, {
            method: 'POST',
            headers: MCP_HEADERS,
            body: JSON.stringify(mcpInitialize('x')),
            signal: AbortSignal.timeout(10_000),
          });
          await res.arrayBuffer();
          hostile.sessions[res.status] = (hostile.sessions[res.status] ?? 0) + 1;
        } catch {
          hostile.sessions.failed = (hostile.sessions.failed ?? 0) + 1;
        }
      }
    })(),
  );
  loops.push(
    (async () => {
      while (running) {
        for (const api of apis) maxApiRss = Math.max(maxApiRss, await rssMb(api.pid()));
        await sleep(1_000);
      }
    })(),
  );

  // --- faults -------------------------------------------------------------------------------
  const failures: string[] = [];
  const readLog = async () => {
    const store = await openLmdbEventStore({ path: join(dir, 'events') });
    try {
      return await store.readAll();
    } finally {
      await store.close();
    }
  };
  const debitsOf = (events: RecordedEvent[], key: string) => {
    const hash = hashApiKey(key);
    return events.reduce((sum, e) => sum + debitedUnits(e, hash), 0);
  };

  await sleep(BETWEEN_MS);
  const victims: { name: string; proc: Proc }[] = [
    ...roles.map((r) => ({ name: r.name, proc: r as Proc })),
    {
      name: 'nats',
      proc: {
        name: 'nats',
        crashes: [],
        pid: () => undefined,
        start: () => nats.restart(),
        kill: () => nats.kill('SIGKILL'),
      },
    },
    { name: 'redis', proc: redis },
  ];
  for (const victim of victims) {
    say(`kill -9 ${victim.name}`);
    await victim.proc.kill();
    await sleep(2_000);
    await victim.proc.start();
    say(`${victim.name} restarted`);
    if (victim.name === 'redis') {
      // Counters right after the loss: with the load paused, the next call's count equals the log.
      // Paused long enough for the apis' idle leases to come back (QuotaMeter: 250-500 ms).
      paused = true;
      await sleep(1_000);
      let seen: number | null = null;
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const answer = await call(apis[0]!.url, pro.key, proTally);
        if (answer?.status === 200) {
          seen = (answer.body._service as { quota: { used: number } }).quota.used;
          break;
        }
        await sleep(200);
      }
      const logged = debitsOf(await readLog(), pro.key);
      say(`after the Redis loss: the pro key's counter says used ${seen}, the log holds ${logged} debits`);
      if (seen !== logged) failures.push(`counter after the Redis loss: used ${seen}, log ${logged}`);
      paused = false;
    }
    await sleep(BETWEEN_MS);
  }

  // --- the free key's day cap across both replicas -------------------------------------------
  const freeTally = tally();
  await Promise.all(Array.from({ length: 300 }, (_, i) => call(apis[i % 2]!.url, free.key, freeTally)));
  say(`free key, 300 concurrent calls over both replicas: ${JSON.stringify(freeTally.byStatus)}`);

  running = false;
  await Promise.all(loops);
  say('load stopped; stopping the roles with SIGTERM');
  await Promise.all(roles.map((r) => r.stop()));

  // --- checks ------------------------------------------------------------------------------
  const events = await readLog();
  const ids = new Set<string>();
  let duplicates = 0;
  for (const e of events) {
    if (ids.has(e.id)) duplicates++;
    ids.add(e.id);
  }
  const crashes = [...roles.flatMap((r) => r.crashes), ...redis.crashes];
  const proDebits = debitsOf(events, pro.key);
  const freeDebits = debitsOf(events, free.key);
  // Scheduled verdicts per market: every hourly close from the first to the last has one.
  const closes = new Map<string, Set<number>>();
  for (const e of events) {
    if (e.type !== 'VerdictRecorded') continue;
    const v = e.data as {
      exchange: string;
      coin: string;
      timeframe: string;
      candleCloseTime: number;
      trigger: string;
    };
    if (v.trigger !== 'schedule') continue;
    const market = `${v.exchange}:${v.coin}:${v.timeframe}`;
    if (!closes.has(market)) closes.set(market, new Set());
    closes.get(market)!.add(v.candleCloseTime);
  }
  let missingVerdicts = 0;
  let verdicts = 0;
  const holes: string[] = [];
  for (const [market, set] of closes) {
    const sorted = [...set].sort((a, b) => a - b);
    verdicts += sorted.length;
    const step = TIMEFRAME_MS[market.split(':')[2]!] ?? 3_600_000;
    for (let i = 1; i < sorted.length; i++) {
      const gap = Math.round((sorted[i]! - sorted[i - 1]!) / step) - 1;
      if (gap > 0) {
        missingVerdicts += gap;
        holes.push(
          `${market} between ${new Date(sorted[i - 1]!).toISOString()} and ${new Date(sorted[i]!).toISOString()}`,
        );
      }
    }
  }

  if (crashes.length > 0) failures.push(`unexpected exits: ${crashes.join('; ')}`);
  if (duplicates > 0) failures.push(`${duplicates} duplicate event ids`);
  // A 200 is never served without its debit; a debit without a 200 can only be a call in flight
  // on a replica that was killed (its answer lost with it), or a unit of the lease it held for the
  // key's next calls (one lease per killed api, LEASE_MAX_UNITS at most).
  const leaseAllowance = apis.length * LEASE_MAX_UNITS;
  if (proTally.ok > proDebits || proDebits - proTally.ok > proTally.failed + leaseAllowance)
    failures.push(
      `pro key: ${proTally.ok} served, ${proDebits} debited, ${proTally.failed} connection errors`,
    );
  if (freeTally.ok !== 100 || freeDebits !== 100)
    failures.push(`free key: ${freeTally.ok} served and ${freeDebits} debited of 100 a day`);
  if (missingVerdicts > 0)
    failures.push(`${missingVerdicts} scheduled closes without a verdict: ${holes.join('; ')}`);
  if (verdicts === 0) failures.push('no scheduled verdicts at all: the engine never ran');

  const summary = {
    seconds: Math.round((Date.now() - started) / 1000),
    events: events.length,
    duplicateIds: duplicates,
    unexpectedExits: crashes,
    pro: {
      served: proTally.ok,
      debited: proDebits,
      connectionErrors: proTally.failed,
      byStatus: proTally.byStatus,
    },
    free: { served: freeTally.ok, debited: freeDebits, byStatus: freeTally.byStatus },
    anonymous: anonTally.byStatus,
    hostile: {
      hugeBodies: hostile.huge,
      slowBodyHeldMs: hostile.slowMs.length ? Math.max(...hostile.slowMs) : null,
      slowBodies: hostile.slowMs.length,
      mcpInitialize: hostile.sessions,
      apiMaxRssMb: maxApiRss,
    },
    scheduledVerdicts: verdicts,
    markets: closes.size,
    missingVerdicts,
    failures,
  };
  say(`summary\n${JSON.stringify(summary, null, 2)}`);
  say(failures.length === 0 ? 'PASS: every check held' : `FAIL:\n  - ${failures.join('\n  - ')}`);

  await nats.dispose();
  await redis.kill();
  if (!args.keep) await rm(dir, { recursive: true, force: true });
  else say(`kept ${dir} (role logs: <role>.log)`);
  return failures.length === 0 ? 0 : 1;
}

/** Stops for what main started outside `children` (the private NATS server). */
const cleanups: (() => Promise<void>)[] = [];
try {
  process.exitCode = await main();
} catch (err) {
  say(`FAIL: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
} finally {
  // Whatever main left running (it threw half-way): nothing outlives the run.
  killChildren();
  for (const cleanup of cleanups) await cleanup().catch(() => undefined);
}

/** kill -9 of a child that is still running, returning once it has exited. */
async function sigkill(c: ChildProcess | null | undefined): Promise<void> {
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  c.kill('SIGKILL');
  await once(c, 'exit');
}
