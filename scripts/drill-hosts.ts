/**
 * The fault drill across hosts (issue 33): every role and every engine node on a host of its own
 * (a network namespace on one bridge), under keyed load, paid calls and webhook traffic, with
 * kill -9 of each role and each engine node and one api host cut off from PostgreSQL, then a
 * reconciliation of every count.
 *
 * Hosts: PostgreSQL (a private instance, initdb'd for the run), three NATS JetStream nodes (one
 * cluster, the stream with 3 replicas), Redis (no persistence), the webhook receiver, and the
 * roles projections (with the relay), engine, dispatcher, api-1 and api-2, each with its own
 * DATA_DIR. The chain (anvil, our ERC-3009 token at the Base USDC address) and the drill itself
 * sit on the bridge's address.
 *
 * Faults, one at a time, each followed by a wait until every role is ready again:
 *   kill -9 of projections, engine, dispatcher, api-1, api-2 (restarted after 2 s);
 *   kill -9 of each NATS node (the stream's leader first), Redis and PostgreSQL (all its processes);
 *   api-1 cut off from PostgreSQL (unreachable routes both ways) for --outage-seconds, then healed.
 *
 * Then it stops the load, lets the deployment drain, and reconciles:
 *   - calls: per key, calls answered 200 vs units debited on the log;
 *   - payments: settled payments on the log vs authorisations used on chain vs the seller's balance;
 *   - events: relayed events on the log vs messages on the stream vs webhook deliveries (log
 *     and receiver), duplicates at each stage;
 *   - no event id twice, no unexpected exit, every role ready at the end;
 * and prints readiness over time (when each host was not ready, and why).
 *
 *   npx tsx scripts/drill-hosts.ts [--short] [--seconds-between=N] [--outage-seconds=30]
 *                                  [--stall-seconds=60] [--report=FILE] [--keep]
 *
 * --short: short phases for CI (about a minute; see deploy/README.md); --stall-seconds: a start (or a
 * recovery) fails only when readiness and the log have not changed for this long; --report:
 * where to write the JSON report; --keep: keep the work directory (logs, PostgreSQL data), as
 * a failed run does.
 * Needs root, iproute2, nats-server, redis-server, PostgreSQL's initdb/postgres, openssl, setpriv.
 * Exit 0 when every count reconciled, 1 when not, 2 when a tool is missing. Everything it
 * started (processes, namespaces, veths, the bridge) is removed on any exit.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { chownSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { appendFile, chmod, mkdir, mkdtemp } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect } from '@nats-io/transport-node';
import pg from 'pg';
import { type Hex, toHex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { openPostgresEventStore } from '../adapters/event-store/postgres.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { hashApiKey } from '../services/keys/key-material.ts';
import { debitedUnits } from '../services/metering/quota-projection.ts';
import { evolveRecorded, type PaymentState } from '../services/payments/payment-state.ts';
import { BASE_USDC, FACILITATOR_KEY, startLocalChain } from '../test/chain/local-chain.ts';
import { freshAuthorization, signAuthorization, v1Header } from '../test/chain/x402-auth.ts';
import { streamMessageIds } from '../test/nats-server.ts';
import { selfSignedCert } from '../test/webhooks-receiver.ts';
import { DrillNet } from './drill/net.ts';
import { preflight } from './drill/preflight.ts';
import { children, killAllChildren, type Managed, managed } from './drill/procs.ts';

const ROOT = new URL('..', import.meta.url).pathname;

const { values: args } = parseArgs({
  options: {
    short: { type: 'boolean', default: false },
    'seconds-between': { type: 'string' },
    'outage-seconds': { type: 'string' },
    'stall-seconds': { type: 'string', default: '60' },
    report: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
});
const SHORT = args.short;
const BETWEEN_MS = Number(args['seconds-between'] ?? (SHORT ? 1 : 8)) * 1000;
const OUTAGE_MS = Number(args['outage-seconds'] ?? (SHORT ? 6 : 30)) * 1000;
const STALL_MS = Number(args['stall-seconds']) * 1000;
/** A lease's units at most (QUOTA_LEASE_MAX_UNITS): what a killed api may leave charged per key. */
const DRILL_LEASE_MAX_UNITS = 64;
/** WEBHOOK_STUCK_AFTER_MS of every role: when another dispatcher takes over a waiting attempt. */
const STUCK_AFTER_MS = 20_000;

/** How long a killed process stays down before its restart. */
const DOWN_MS = SHORT ? 500 : 2_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const started = Date.now();
const at = () => Number(((Date.now() - started) / 1000).toFixed(1));
const say = (line: string) => process.stdout.write(`[${at().toFixed(1).padStart(6)} s] ${line}\n`);

// ---------------------------------------------------------------------------------------------
// Tools

// ---------------------------------------------------------------------------------------------
// Clean-up on any exit

let net: DrillNet | null = null;
let workDir: string | null = null;
let cleaned = false;
function cleanup(keepFiles = args.keep): void {
  if (cleaned) return;
  cleaned = true;
  killAllChildren();
  // anvil is the chain harness's child, not ours: found by the bridge address it listens on.
  const gateway = (net as DrillNet | null)?.gateway;
  if (gateway) {
    for (const line of execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' }).split('\n')) {
      if (line.includes('anvil') && line.includes(` --host ${gateway} `)) {
        try {
          process.kill(Number(line.trim().split(' ')[0]), 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
    }
  }
  const errors = net?.teardown() ?? [];
  for (const e of errors) process.stderr.write(`drill clean-up: ${e}\n`);
  if (workDir && !keepFiles) rmSync(workDir, { recursive: true, force: true });
  else if (workDir) say(`kept ${workDir} (a log per host, PostgreSQL's data, the NATS stores, the receipts)`);
}
process.once('exit', () => cleanup());
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    say(`${signal}: stopping everything the drill started`);
    cleanup();
    process.exit(130);
  });
}

// ---------------------------------------------------------------------------------------------
// Probes

async function httpProbe(url: string): Promise<{ ready: boolean; detail: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(3_000) });
  const body = await res.text();
  return { ready: res.status === 200, detail: `${res.status} ${body}` };
}

function redisPing(host: string, port: number): Promise<{ ready: boolean; detail: string }> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    let data = '';
    const done = (ready: boolean, detail: string) => {
      socket.destroy();
      resolve({ ready, detail });
    };
    socket.setTimeout(2_000, () => done(false, 'timeout'));
    socket.on('error', (e) => done(false, e.message));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (b) => {
      data += b.toString();
      if (data.includes('\r\n')) done(data.startsWith('+PONG'), data.trim());
    });
  });
}

async function pgProbe(url: string): Promise<{ ready: boolean; detail: string }> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return { ready: true, detail: 'ok' };
  } catch (err) {
    return { ready: false, detail: String(err) };
  } finally {
    await client.end().catch(() => undefined);
  }
}

interface Ready {
  status?: string;
  checks?: Record<string, { ok: boolean; checkpoint?: number; detail?: string; [k: string]: unknown }>;
}

async function readyz(url: string): Promise<{ status: number; body: Ready } | null> {
  try {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3_000) });
    return { status: res.status, body: (await res.json()) as Ready };
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------

interface CallTally {
  served: number;
  byStatus: Record<string, number>;
  /** No answer: connection refused or reset, or timed out (a host killed or cut off). */
  failed: number;
  /** When each 200 was asked and answered (ms since epoch). */
  servedAt: { asked: number; answered: number }[];
}

interface PaidCall {
  nonce: Hex;
  status: number | null;
  at: number;
}

interface Sample {
  t: number;
  host: string;
  /** 200, 503, or 0 for no answer. */
  status: number;
  failing: string[];
}

interface FaultRecord {
  fault: string;
  at: number;
  /** Seconds from the fault until every role answered /readyz 200 again. */
  recoveredAfter: number | null;
  /** Per host: the checks that failed during the fault, and the longest non-ready stretch. */
  effects: Record<string, { notReadyFor: number; failing: string[] }>;
  /** Notable gauges during the fault, per host: the highest seen, the lowest for replicas `current`. */
  metrics: Record<string, Record<string, number>>;
  note?: string;
}

async function main(): Promise<number> {
  const { missing, tools } = preflight();
  if (missing.length > 0) {
    say(`cannot run the drill: missing ${missing.join(', ')}`);
    return 2;
  }
  net = new DrillNet();
  say(`network ${net.subnet}.0/24 on bridge ${net.bridge}; names start with ${net.prefix}`);
  workDir = await mkdtemp(join(tmpdir(), `drill-${net.prefix}-`));
  // PostgreSQL runs as its own user: it must reach its directory.
  await chmod(workDir, 0o755);
  say(`work directory ${workDir}`);
  const n = net;
  const hostTags = ['pg', 'n1', 'n2', 'n3', 'rd', 'rx', 'pj', ...(SHORT ? [] : ['en', 'ds']), 'a1', 'a2'];
  const ipOf = (tag: string) => n.host(tag).ip;

  // --- PostgreSQL ----------------------------------------------------------------------------
  const pgData = join(workDir, 'pg');
  await mkdir(pgData);
  const pgUser = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const pgGroup = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  chownSync(pgData, pgUser, pgGroup);
  const asPostgres = ['--reuid=postgres', '--regid=postgres', '--init-groups'];
  // initdb (over a second under load) runs while the hosts are made, which needs nothing of it.
  // One of the drill's children: a stop half-way kills it with the rest.
  const initdb = spawn(
    tools.setpriv!,
    [...asPostgres, tools.initdb!, '-D', pgData, '-U', 'postgres', '-A', 'trust', '--no-sync'],
    { stdio: 'ignore' },
  );
  children.add(initdb);
  // once() rejects on 'error' (setpriv or initdb not started) as well.
  const initialised = once(initdb, 'exit').then(([code, signal]) => {
    children.delete(initdb);
    if (code !== 0) throw new Error(`initdb exited ${code ?? signal}`);
  });
  // Handled here too, so that a host failing to come up is the error reported, not initdb's.
  initialised.catch(() => undefined);
  for (const tag of hostTags) n.addHost(tag);
  await initialised;
  await appendFile(join(pgData, 'pg_hba.conf'), `host all all ${n.subnet}.0/24 trust\n`);
  const POSTGRES_URL = `postgres://postgres@${ipOf('pg')}:5432/postgres`;
  const postgres = managed({
    name: 'postgres',
    argv: () =>
      n.exec('pg', tools.setpriv!, [
        ...asPostgres,
        tools.postgres!,
        '-D',
        pgData,
        '-c',
        `listen_addresses=${ipOf('pg')}`,
        '-c',
        'port=5432',
        '-c',
        `unix_socket_directories=${pgData}`,
        '-c',
        'max_connections=300',
        '-c',
        'shared_buffers=64MB',
      ]),
    logFile: join(workDir, 'postgres.log'),
    probe: () => pgProbe(POSTGRES_URL),
    stallMs: STALL_MS,
    // Backends leave when they notice the postmaster is gone; a restart must wait for them
    // (they hold the shared memory). Those that linger are killed: the host is down.
    afterKill: async () => {
      const deadline = Date.now() + 10_000;
      while (n.pids('pg').length > 0 && Date.now() < deadline) await sleep(100);
      for (const pid of n.pids('pg')) process.kill(pid, 'SIGKILL');
      while (n.pids('pg').length > 0) await sleep(100);
    },
  });

  // --- NATS ----------------------------------------------------------------------------------
  const natsNodes = ['n1', 'n2', 'n3'].map((tag) => {
    const conf = join(workDir!, `${tag}.conf`);
    const routes = ['n1', 'n2', 'n3'].map((t) => `"nats-route://${ipOf(t)}:6222"`).join(', ');
    writeFileSync(
      conf,
      [
        `server_name: ${tag}`,
        `listen: "${ipOf(tag)}:4222"`,
        `http: "${ipOf(tag)}:8222"`,
        `jetstream { store_dir: "${join(workDir!, tag)}" }`,
        `cluster { name: "drill", listen: "${ipOf(tag)}:6222", routes: [${routes}] }`,
        '',
      ].join('\n'),
    );
    return managed({
      name: `nats-${tag}`,
      argv: () => n.exec(tag, tools['nats-server']!, ['-c', conf]),
      logFile: join(workDir!, `nats-${tag}.log`),
      // Healthy once JetStream is up on the node (meta leader known, assets current).
      probe: () => httpProbe(`http://${ipOf(tag)}:8222/healthz`),
      stallMs: STALL_MS,
    });
  });
  const NATS_URL = ['n1', 'n2', 'n3'].map((t) => `nats://${ipOf(t)}:4222`).join(',');

  // --- Redis ---------------------------------------------------------------------------------
  const redis = managed({
    name: 'redis',
    argv: () =>
      n.exec('rd', tools['redis-server']!, [
        '--bind',
        ipOf('rd'),
        '--port',
        '6379',
        '--protected-mode',
        'no',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        workDir!,
        '--maxmemory-policy',
        'noeviction',
      ]),
    logFile: join(workDir, 'redis.log'),
    probe: () => redisPing(ipOf('rd'), 6379),
    stallMs: STALL_MS,
  });

  // --- the webhook receiver ------------------------------------------------------------------
  const keyFile = join(workDir, 'rx-key.pem');
  const certFile = join(workDir, 'rx-cert.pem');
  const tls = selfSignedCert([ipOf('rx')]);
  writeFileSync(keyFile, tls.key);
  writeFileSync(certFile, tls.cert);
  const receipts = join(workDir, 'receipts.jsonl');
  writeFileSync(receipts, '');
  const receiver = managed({
    name: 'receiver',
    argv: () =>
      n.exec('rx', process.execPath, [
        '--import',
        'tsx',
        'scripts/drill/receiver.ts',
        ipOf('rx'),
        '8443',
        keyFile,
        certFile,
        receipts,
      ]),
    cwd: ROOT,
    logFile: join(workDir, 'receiver.log'),
    probe: async () => {
      const log = readFileSync(join(workDir!, 'receiver.log'), 'utf8');
      return { ready: log.includes('receiver listening'), detail: log };
    },
    stallMs: STALL_MS,
  });

  say('starting PostgreSQL, three NATS nodes, Redis, the receiver and the chain');
  const [chain] = await Promise.all([
    startLocalChain({ host: n.gateway }),
    postgres.start(),
    ...natsNodes.map((node) => node.start()),
    redis.start(),
    receiver.start(),
  ]);
  const stopChain = () => chain.stop();
  const payTo = privateKeyToAccount(toHex(randomBytes(32))).address;
  const payer = await chain.fundedPayer(10n ** 12n);
  const payToBefore = await chain.balanceOf(payTo);
  say(`engines up: postgres ${postgres.starts[0]} s, nats ${natsNodes.map((x) => x.starts[0]).join('/')} s`);

  try {
    return await drill({
      n,
      tools,
      postgres,
      natsNodes,
      redis,
      receiver,
      POSTGRES_URL,
      NATS_URL,
      chain,
      payTo,
      payer,
      payToBefore,
      receipts,
      certFile,
    });
  } finally {
    await stopChain().catch(() => undefined);
  }
}

async function drill(ctx: {
  n: DrillNet;
  tools: Record<string, string>;
  postgres: Managed;
  natsNodes: Managed[];
  redis: Managed;
  receiver: Managed;
  POSTGRES_URL: string;
  NATS_URL: string;
  chain: Awaited<ReturnType<typeof startLocalChain>>;
  payTo: Hex;
  payer: { key: Hex; address: Hex };
  payToBefore: bigint;
  receipts: string;
  certFile: string;
}): Promise<number> {
  const { n, postgres, natsNodes, redis, POSTGRES_URL, NATS_URL, chain, payTo, payer } = ctx;
  const ipOf = (tag: string) => n.host(tag).ip;
  const SCHEMA = 'drill';
  const STREAM = 'DRILL';

  // Keys first, on the log every role reads.
  const seed = await openPostgresEventStore({ url: POSTGRES_URL, schema: SCHEMA });
  const keys = await Promise.all(
    Array.from({ length: 4 }, (_, i) =>
      issueKey(seed, { plan: 'pro', owner: `drill-${i}`, via: 'operator' }),
    ),
  );
  await seed.close();

  const env: Record<string, string> = {
    LOG_LEVEL: 'info',
    PORT: '8080',
    EVENT_STORE: 'postgres',
    POSTGRES_URL,
    POSTGRES_SCHEMA: SCHEMA,
    BUS: 'nats',
    NATS_URL,
    NATS_STREAM: STREAM,
    NATS_SUBJECT_PREFIX: 'drill',
    NATS_STREAM_REPLICAS: '3',
    CACHE: 'redis',
    REDIS_URL: `redis://${ipOf('rd')}:6379`,
    REDIS_PREFIX: 'drill:',
    FEED: 'replay',
    REPLAY_SPEED: '1800',
    SCHEDULE_TIMEFRAMES: '1h',
    SCHEDULE_TOP_N: '6',
    // Paid calls carry no key: all of them come from the drill's one address.
    RATE_LIMIT_ANONYMOUS: '1000000',
    REQUEST_TIMEOUT_MS: '5000',
    QUOTA_LEASE_MAX_UNITS: String(DRILL_LEASE_MAX_UNITS),
    SHUTDOWN_TIMEOUT_MS: '10000',
    ALLOWED_HOSTS: '*',
    X402_PAY_TO: payTo,
    X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
    X402_RPC_URL: chain.rpcUrl,
    X402_ASSET: BASE_USDC,
    X402_SETTLE_CONFIRM_TIMEOUT_MS: '5000',
    // Payments a killed api left open are finished by the next reconciliation round, soon.
    X402_RECONCILE_AFTER_MS: '6000',
    X402_RECONCILE_INTERVAL_MS: '1000',
    WEBHOOK_MASTER_KEY: randomBytes(32).toString('hex'),
    WEBHOOK_TEST_ALLOW_CIDRS: `${ipOf('rx')}/32`,
    WEBHOOK_ALLOWED_PORTS: '*',
    WEBHOOK_RETRY_SCHEDULE: '0,1s,2s,4s,8s,15s,30s',
    // An attempt claimed by a dispatcher killed before it sent is sent again after this (default
    // 2 min, longer than the drill waits for a drain that stopped moving).
    WEBHOOK_STUCK_AFTER_MS: String(STUCK_AFTER_MS),
    NODE_EXTRA_CA_CERTS: ctx.certFile,
  };
  // The full drill runs every role on a host of its own. The short one (CI) runs three role
  // processes, so that their starts (mostly module loading) fit a 2-core machine's budget: the
  // back host's kill -9 takes the relay and the dispatcher down at once, api-1's the engine with it.
  const roleDefs: [string, string, string][] = SHORT
    ? [
        ['back', 'pj', 'projections,dispatcher'],
        ['api-1', 'a1', 'api,engine'],
        ['api-2', 'a2', 'api'],
      ]
    : [
        ['projections', 'pj', 'projections'],
        ['engine', 'en', 'engine'],
        ['dispatcher', 'ds', 'dispatcher'],
        ['api-1', 'a1', 'api'],
        ['api-2', 'a2', 'api'],
      ];
  const relayHost = SHORT ? 'back' : 'projections';
  const dispatcherHost = SHORT ? 'back' : 'dispatcher';
  const roles = new Map<string, Managed & { url: string; tag: string }>();
  for (const [name, tag, role] of roleDefs) {
    const dataDir = join(workDir!, name);
    await mkdir(dataDir, { recursive: true });
    const url = `http://${ipOf(tag)}:8080`;
    const m = managed({
      name,
      argv: () => n.exec(tag, process.execPath, ['--import', 'tsx', 'services/main.ts', '--role', role]),
      cwd: ROOT,
      env: { ...env, HOST: ipOf(tag), DATA_DIR: dataDir },
      logFile: join(workDir!, `${name}.log`),
      probe: () => httpProbe(`${url}/readyz`),
      stallMs: STALL_MS,
    });
    roles.set(name, Object.assign(m, { url, tag }));
  }
  const role = (name: string) => roles.get(name)!;
  say('starting the roles');
  await Promise.all([...roles.values()].map((r) => r.start()));
  say(`roles ready: ${[...roles.values()].map((r) => `${r.name} ${r.starts[0]} s`).join(', ')}`);

  // The webhook subscription, through the api, before any load.
  const created = await fetch(`${role('api-1').url}/api/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[0]!.key}` },
    body: JSON.stringify({ url: `https://${ipOf('rx')}:8443/hook`, events: ['trade_call', 'regime_shift'] }),
  });
  const subscription = (await created.json()) as { id?: string };
  if (created.status !== 201 || !subscription.id)
    throw new Error(`webhook subscription refused: ${created.status} ${JSON.stringify(subscription)}`);
  const subscriptionPosition = await (async () => {
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema: SCHEMA });
    try {
      const e = (await store.readAll()).find(
        (x) =>
          x.type === 'SubscriptionCreated' &&
          (x.data as { subscriptionId: string }).subscriptionId === subscription.id,
      );
      return e!.position;
    } finally {
      await store.close();
    }
  })();
  // The dispatcher knows the subscription before the first event it must deliver.
  for (;;) {
    const r = await readyz(role(dispatcherHost).url);
    if ((r?.body.checks?.['projection:webhooks']?.checkpoint ?? -1) >= subscriptionPosition) break;
    await sleep(200);
  }
  say(`subscription ${subscription.id} at position ${subscriptionPosition}; load starts`);

  // --- load ----------------------------------------------------------------------------------
  let running = true;
  const apis = [role('api-1'), role('api-2')];
  const tallies = new Map(
    keys.map((k) => [k.key, { served: 0, byStatus: {}, failed: 0, servedAt: [] } as CallTally]),
  );
  // Short timeframes on a fast replay close a candle every moment: new verdicts, new webhooks.
  const markets = ['BTC', 'ETH', 'SOL', 'BNB', 'XRP', 'DOGE'].flatMap((coin) =>
    ['5m', '15m', '1h', '4h'].map((timeframe) => ({ coin, timeframe })),
  );
  const loops: Promise<void>[] = [];
  let turn = 0;
  for (let w = 0; w < 6; w++) {
    loops.push(
      (async () => {
        while (running) {
          const i = turn++;
          const key = keys[i % keys.length]!.key;
          const t = tallies.get(key)!;
          const api = apis[i % apis.length]!;
          const regime = i % 3 === 0;
          const m = markets[i % markets.length]!;
          const asked = Date.now();
          try {
            const res = await fetch(`${api.url}/x402/${regime ? 'get_market_regime' : 'get_trade_call'}`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
              body: JSON.stringify(regime ? { coin: m.coin } : { ...m, exchange: 'BINANCE_SPOT' }),
              signal: AbortSignal.timeout(10_000),
            });
            await res.arrayBuffer();
            t.byStatus[res.status] = (t.byStatus[res.status] ?? 0) + 1;
            if (res.status === 200) {
              t.served++;
              t.servedAt.push({ asked, answered: Date.now() });
            }
          } catch {
            t.failed++;
          }
          await sleep(20);
        }
      })(),
    );
  }
  const paid: PaidCall[] = [];
  loops.push(
    (async () => {
      let i = 0;
      while (running) {
        const api = apis[i++ % apis.length]!;
        const auth = freshAuthorization(payTo, payer.address, 20_000n);
        const signature = await signAuthorization(payer.key, auth);
        const call: PaidCall = { nonce: auth.nonce, status: null, at: Date.now() };
        paid.push(call);
        try {
          const res = await fetch(`${api.url}/x402/get_market_regime`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-payment': v1Header(auth, signature) },
            body: JSON.stringify({ coin: 'BTC' }),
            signal: AbortSignal.timeout(20_000),
          });
          await res.arrayBuffer();
          call.status = res.status;
        } catch {
          call.status = null;
        }
        await sleep(SHORT ? 200 : 400);
      }
    })(),
  );

  // Readiness (every 500 ms) and a few gauges (every 2 s) of every role, for the timeline.
  const samples: Sample[] = [];
  const gauges: { t: number; host: string; values: Record<string, number> }[] = [];
  /** Asks every role at once, then again `pauseMs` later, until the run stops. */
  const everyRole = (pauseMs: number, ask: (r: Managed & { url: string; tag: string }) => Promise<void>) =>
    loops.push(
      (async () => {
        while (running) {
          await Promise.all([...roles.values()].map(ask));
          await sleep(pauseMs);
        }
      })(),
    );
  everyRole(500, async (r) => {
    const answer = await readyz(r.url);
    samples.push({
      t: at(),
      host: r.name,
      status: answer?.status ?? 0,
      failing: Object.entries(answer?.body.checks ?? {})
        .filter(([, c]) => !c.ok)
        .map(([name, c]) => `${name}${c.detail ? `: ${String(c.detail).slice(0, 120)}` : ''}`),
    });
  });
  everyRole(2_000, async (r) => {
    const values = await scrape(r.url);
    if (values) gauges.push({ t: at(), host: r.name, values });
  });

  // --- faults --------------------------------------------------------------------------------
  const faults: FaultRecord[] = [];
  const failures: string[] = [];
  /** Every role ready again: fails only when the set of failing checks has not changed for 2 × stall. */
  const allReady = async (): Promise<void> => {
    let last = '';
    let movedAt = Date.now();
    for (;;) {
      const answers = await Promise.all(
        [...roles.values()].map(async (r) => [r.name, await readyz(r.url)] as const),
      );
      if (answers.every(([, a]) => a?.status === 200)) return;
      const state = answers
        .filter(([, a]) => a?.status !== 200)
        .map(
          ([name, a]) =>
            `${name}: ${
              a
                ? Object.entries(a.body.checks ?? {})
                    .filter(([, c]) => !c.ok)
                    .map(([k]) => k)
                    .join(',')
                : 'no answer'
            }`,
        )
        .join('; ');
      if (state !== last) {
        last = state;
        movedAt = Date.now();
      }
      if (Date.now() - movedAt > 2 * STALL_MS) throw new Error(`not every role recovers: ${state}`);
      await sleep(250);
    }
  };
  const record = async (fault: string, act: () => Promise<string | undefined>) => {
    const t0 = at();
    say(`fault: ${fault}`);
    let note: string | undefined;
    try {
      note = await act();
      await allReady();
    } catch (err) {
      failures.push(`${fault}: ${err instanceof Error ? err.message : String(err)}`);
    }
    const t1 = at();
    faults.push({
      fault,
      at: t0,
      recoveredAfter: Number((t1 - t0).toFixed(1)),
      effects: {},
      metrics: {},
      ...(note ? { note } : {}),
    });
    say(`  every role ready again after ${(t1 - t0).toFixed(1)} s${note ? ` (${note})` : ''}`);
  };
  const killRestart = (m: Managed) => async () => {
    await m.kill();
    await sleep(DOWN_MS);
    await m.start();
    return undefined;
  };

  await sleep(BETWEEN_MS * 2);
  type Fault = { name: string; act: () => Promise<string | undefined> };
  const roleFaults: Fault[] = roleDefs.map(([name, , roles]) => ({
    name: `kill -9 ${name}`,
    act: async () => {
      if (roles.split(',').includes('api')) apiKills++;
      return killRestart(role(name))();
    },
  }));
  // The stream's leader first: the node whose loss the bus notices most.
  const leader = await streamLeader(NATS_URL, STREAM);
  const natsFaults: Fault[] = [...natsNodes]
    .sort((a, b) => Number(b.name === `nats-${leader}`) - Number(a.name === `nats-${leader}`))
    .map((node) => ({
      name: `kill -9 ${node.name}`,
      act: async () => {
        const wasLeader = node.name === `nats-${await streamLeader(NATS_URL, STREAM)}`;
        await killRestart(node)();
        return wasLeader ? 'the stream leader' : 'a follower';
      },
    }));
  let pgKilledAt = 0;
  let pgDeadAt = 0;
  let apiKills = 0;
  const engineFaults: Fault[] = [
    { name: 'kill -9 redis', act: killRestart(redis) },
    {
      name: 'kill -9 postgres',
      act: async () => {
        pgKilledAt = Date.now();
        await postgres.kill();
        pgDeadAt = Date.now();
        await sleep(DOWN_MS);
        await postgres.start();
        return undefined;
      },
    },
  ];
  const cut: Fault = {
    name: `api-1 cut off from PostgreSQL for ${OUTAGE_MS / 1000} s`,
    act: async () => {
      n.cut('a1', 'pg');
      await sleep(OUTAGE_MS);
      n.heal('a1', 'pg');
      return undefined;
    },
  };
  // The full drill takes one fault at a time. The short one overlaps a role's restart (mostly
  // module loading) with an engine node's kill, and kills one of the two apis (each role once),
  // to fit CI's time.
  const steps: Fault[][] = SHORT
    ? [
        [roleFaults[0]!, natsFaults[0]!],
        [roleFaults[1]!, natsFaults[1]!, engineFaults[0]!],
        [natsFaults[2]!, engineFaults[1]!],
        [cut],
      ]
    : [...roleFaults, ...natsFaults, ...engineFaults, cut].map((f) => [f]);
  for (const [i, step] of steps.entries()) {
    await record(step.map((f) => f.name).join(' + '), async () => {
      const notes = await Promise.all(step.map((f) => f.act()));
      return notes.filter(Boolean).join(', ') || undefined;
    });
    // Load between two faults; after the last, the load stops and the drain waits on conditions.
    if (i < steps.length - 1) await sleep(BETWEEN_MS);
  }

  running = false;
  await Promise.all(loops);
  say('load stopped; draining');

  // --- drain ---------------------------------------------------------------------------------
  // Payments a killed api left open are finished by the apis' reconciler; then the hosts that
  // write relayed events (the engine's verdicts, the apis' answers) stop, so that the log, the
  // stream and the receiver are compared at rest; the relay and the dispatcher finish last.
  const store = await openPostgresEventStore({ url: POSTGRES_URL, schema: SCHEMA });
  const stops: [string, string][] = [];
  try {
    // Open: reserved, or handed off with its answer given. One whose answer reached no one (its
    // api killed before answering) waits for its payer to present it again or for its expiry:
    // not charged meanwhile (its payer may have paid anew), so the drain does not wait for it.
    // A payment reserved by a killed api is released only once its authorisation has expired
    // (until then anyone holding it could land it): the chain's clock is moved past the latest
    // open one's validBefore, so the reconciler releases it within the drain.
    const reserved = [...paymentStates(await store.readAll()).values()].filter(
      (p) => p.status === 'authorized',
    );
    const latest = reserved.reduce((m, p) => {
      const before = BigInt(p.authorized?.validBefore ?? 0);
      return before > m ? before : m;
    }, 0n);
    if (latest >= (await chain.publicClient.getBlock()).timestamp) {
      await chain.testClient.setNextBlockTimestamp({ timestamp: latest + 1n });
      await chain.testClient.mine({ blocks: 1 });
      say(
        `${reserved.length} reserved payment(s) left by a kill: the chain clock moved past their authorisations' validBefore`,
      );
    }
    await drained('no payment left open', STALL_MS, async () => {
      const open = [...paymentStates(await store.readAll()).values()].filter(
        (p) => p.status === 'authorized' || (p.status === 'pending' && p.served),
      ).length;
      return { done: open === 0, progress: String(open) };
    });
    const writers = roleDefs.filter(([, , r]) => /api|engine/.test(r)).map(([name]) => role(name));
    stops.push(
      ...(await Promise.all(writers.map(async (r) => [r.name, await r.stop()] as [string, string]))),
    );
    const head = await store.headPosition();
    await drained('the relay reaches the head', STALL_MS, async () => {
      const c = (await readyz(role(relayHost).url))?.body.checks?.relay?.checkpoint ?? -1;
      return { done: c >= head, progress: String(c) };
    });
    const expected = (log: RecordedEvent[]) =>
      log.filter(
        (e) =>
          e.position > subscriptionPosition &&
          ((e.type === 'VerdictRecorded' && (e.data as { call: string }).call !== 'HOLD') ||
            e.type === 'RegimeShifted'),
      );
    await drained('every webhook delivered', STALL_MS, async () => {
      const log = await store.readAll();
      const succeeded = new Set(
        log
          .filter((e) => e.type === 'DeliverySucceeded')
          .map((e) => (e.data as { deliveryId: string }).deliveryId),
      );
      return { done: succeeded.size >= expected(log).length, progress: String(succeeded.size) };
    });

    // --- reconcile -----------------------------------------------------------------------------
    const log = await store.readAll();
    const report = await reconcile({
      log,
      keys,
      tallies,
      pgKilledAt,
      pgDeadAt,
      // One lease per key on a killed api, whichever of the keyed loop's two tools opened it.
      leaseAllowance: apiKills * DRILL_LEASE_MAX_UNITS,
      paid,
      payments: paymentStates(log),
      chain,
      payer: payer.address,
      payTo,
      payToBefore: ctx.payToBefore,
      expected: expected(log),
      stream: await streamMessageIds(STREAM, NATS_URL),
      receipts: readFileSync(ctx.receipts, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { delivery: string; seq: number | null }),
    });
    failures.push(...drainFailures, ...report.failures);

    // Readiness over time, per fault.
    const timeline = readinessTimeline(samples);
    for (const [i, f] of faults.entries()) {
      const end = faults[i + 1]?.at ?? at();
      for (const r of roles.keys()) {
        const inWindow = samples.filter((s) => s.host === r && s.t >= f.at && s.t < end);
        const bad = inWindow.filter((s) => s.status !== 200);
        if (bad.length === 0) continue;
        f.effects[r] = {
          notReadyFor: Number(longestRun(inWindow).toFixed(1)),
          failing: [
            ...new Set(
              bad.flatMap((s) => (s.status === 0 ? ['no answer'] : s.failing.map((x) => x.split(':')[0]!))),
            ),
          ],
        };
      }
      for (const g of gauges.filter((x) => x.t >= f.at && x.t < end)) {
        f.metrics[g.host] ??= {};
        const m = f.metrics[g.host]!;
        // The replicas up to date: the lowest seen is the news; everything else: the highest.
        for (const [k, v] of Object.entries(g.values))
          m[k] = k.includes('current') ? Math.min(m[k] ?? v, v) : Math.max(m[k] ?? v, v);
      }
    }

    // Stop the roles cleanly: a clean stop must exit 0.
    for (const r of roles.values())
      if (!stops.some(([name]) => name === r.name)) stops.push([r.name, await r.stop()]);
    for (const [name, code] of stops)
      if (code !== '0') failures.push(`${name} did not stop cleanly: ${code}`);
    const crashes = [...roles.values(), postgres, ...natsNodes, redis, ctx.receiver].flatMap(
      (m) => m.crashes,
    );
    const unexpected = crashes.filter((c) => !/did not stop cleanly/.test(c));
    if (unexpected.length > 0) failures.push(`unexpected exits: ${unexpected.join('; ')}`);

    const summary = {
      seconds: Math.round((Date.now() - started) / 1000),
      mode: SHORT ? 'short' : 'full',
      hosts: Object.fromEntries([...n.hosts.values()].map((h) => [h.tag, h.ip])),
      starts: Object.fromEntries(
        [...roles.values(), postgres, ...natsNodes, redis].map((m) => [m.name, m.starts]),
      ),
      ...report.summary,
      faults,
      readiness: timeline,
      failures,
    };
    const out = args.report ?? join(workDir!, 'report.json');
    writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);
    printReport(summary as unknown as Record<string, unknown>, report.summary, faults, failures);
    say(`report written to ${out}`);
    return failures.length === 0 ? 0 : 1;
  } finally {
    await store.close();
  }
}

// ---------------------------------------------------------------------------------------------

/** A drain step that never completes is a failure; the reconciliation still runs and says what. */
const drainFailures: string[] = [];
async function drained(
  what: string,
  stallMs: number,
  check: () => Promise<{ done: boolean; progress: string }>,
): Promise<void> {
  await until(what, stallMs, check).catch((err: unknown) => {
    drainFailures.push(err instanceof Error ? err.message : String(err));
    say(`drain: ${err instanceof Error ? err.message : String(err)}`);
  });
}

async function until(
  what: string,
  stallMs: number,
  check: () => Promise<{ done: boolean; progress: string }>,
): Promise<void> {
  let last = '';
  let movedAt = Date.now();
  for (;;) {
    const r = await check().catch((err: unknown) => ({ done: false, progress: String(err) }));
    if (r.done) return;
    if (r.progress !== last) {
      last = r.progress;
      movedAt = Date.now();
    }
    if (Date.now() - movedAt > stallMs)
      throw new Error(`${what}: no progress for ${stallMs / 1000} s (at ${last})`);
    await sleep(500);
  }
}

/** Payment streams folded to their final state. */
function paymentStates(log: RecordedEvent[]): Map<string, PaymentState> {
  const states = new Map<string, PaymentState>();
  for (const e of log) {
    if (!e.stream.startsWith('payment-')) continue;
    const next = evolveRecorded(states.get(e.stream) ?? null, e);
    if (next) states.set(e.stream, next);
  }
  return states;
}

const GAUGES = [
  'event_store_oldest_pending_append_seconds',
  'event_store_appends_pending',
  'bus_stream_replicas',
  'follower_lag_events',
  'projection_lag_events',
  'webhook_queue_depth',
];

/** A few gauges from /metrics: the largest value of each series name (labels kept for replicas). */
async function scrape(url: string): Promise<Record<string, number> | null> {
  try {
    const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(3_000) });
    const text = await res.text();
    const values: Record<string, number> = {};
    for (const line of text.split('\n')) {
      if (line.startsWith('#')) continue;
      const name = line.split(/[{ ]/)[0]!;
      if (!GAUGES.includes(name)) continue;
      const key = name === 'bus_stream_replicas' ? `${name}${/\{[^}]*\}/.exec(line)?.[0] ?? ''}` : name;
      const v = Number(line.split(' ').at(-1));
      if (Number.isFinite(v)) values[key] = Math.max(values[key] ?? Number.NEGATIVE_INFINITY, v);
    }
    return values;
  } catch {
    return null;
  }
}

async function streamLeader(url: string, stream: string): Promise<string | null> {
  try {
    const nc = await natsConnect({ servers: url.split(','), timeout: 3_000 });
    try {
      return (
        (await (await jetstreamManager(nc, { timeout: 3_000 })).streams.info(stream)).cluster?.leader ?? null
      );
    } finally {
      await nc.close();
    }
  } catch {
    return null;
  }
}

const RELAYED = new Set([
  'VerdictRecorded',
  'RegimeShifted',
  'RiskShifted',
  'SubscriptionReEnabled',
  'SubscriptionDisabled',
]);

async function reconcile(input: {
  log: RecordedEvent[];
  keys: { key: string }[];
  tallies: Map<string, CallTally>;
  pgKilledAt: number;
  /** When the killed PostgreSQL had exited. */
  pgDeadAt: number;
  /**
   * Units a key may be charged beyond its unanswered calls: a killed api's lease (one per key),
   * recorded ahead for calls it never got to serve (QUOTA_LEASE_MAX_UNITS each at most).
   */
  leaseAllowance: number;
  paid: PaidCall[];
  payments: Map<string, PaymentState>;
  chain: Awaited<ReturnType<typeof startLocalChain>>;
  payer: Hex;
  payTo: Hex;
  payToBefore: bigint;
  expected: RecordedEvent[];
  stream: string[];
  receipts: { delivery: string; seq: number | null }[];
}) {
  const { log } = input;
  const failures: string[] = [];

  // Duplicates on the log.
  const ids = new Set(log.map((e) => e.id));
  const duplicateEvents = log.length - ids.size;
  if (duplicateEvents > 0) failures.push(`${duplicateEvents} event ids twice on the log`);

  // Calls: answered vs debited, per key. A 200 is never served without its debit, except one
  // whose debit was committed asynchronously in the last moments before PostgreSQL died (the
  // documented window, 3 × wal_writer_delay); a debit without a 200 is a call whose answer was
  // lost with its host (a killed api, a cut connection, a timed-out request). The client sees
  // only that a call's commit lies between its asking and its answer: a call may have committed
  // in the window if it was asked before PostgreSQL was dead and answered after the window
  // opened, including an answer that reached the client after the kill (a busy api answered
  // 650 ms after it, for a commit made before it).
  const WINDOW_MS = 600;
  const calls = input.keys.map(({ key }) => {
    const t = input.tallies.get(key)!;
    const debited = log.reduce((sum, e) => sum + debitedUnits(e, hashApiKey(key)), 0);
    const atRisk = t.servedAt.filter(
      (x) => x.asked <= input.pgDeadAt && x.answered > input.pgKilledAt - WINDOW_MS,
    ).length;
    return {
      served: t.served,
      debited,
      noAnswer: t.failed,
      atRiskAtPostgresKill: atRisk,
      byStatus: t.byStatus,
    };
  });
  const callTotals = calls.reduce(
    (s, c) => ({
      served: s.served + c.served,
      debited: s.debited + c.debited,
      noAnswer: s.noAnswer + c.noAnswer,
      atRisk: s.atRisk + c.atRiskAtPostgresKill,
    }),
    { served: 0, debited: 0, noAnswer: 0, atRisk: 0 },
  );
  for (const [i, c] of calls.entries()) {
    if (c.served > c.debited + c.atRiskAtPostgresKill)
      failures.push(
        `key ${i}: ${c.served} calls served, ${c.debited} debited (${c.served - c.debited} served free)`,
      );
    if (c.debited - c.served > c.noAnswer + input.leaseAllowance)
      failures.push(
        `key ${i}: ${c.debited} debited for ${c.served} served and ${c.noAnswer} unanswered (leases of killed apis may add ${input.leaseAllowance})`,
      );
  }
  if (callTotals.served === 0) failures.push('no keyed call was served');

  // Payments vs transfers: every payment the log calls settled used its authorisation on chain,
  // every other one did not, and the seller received exactly the settled amounts.
  const byState: Record<string, number> = {};
  let settledOnLog = 0;
  let settledAmount = 0n;
  const payOnLogNonces = new Set<string>();
  for (const p of input.payments.values()) {
    const state = p.status === 'pending' && !p.served ? 'pending, answer given to no one' : p.status;
    byState[state] = (byState[state] ?? 0) + 1;
    const a = p.authorized;
    if (!a) continue;
    payOnLogNonces.add(a.nonce.toLowerCase());
    const used = await input.chain.authorizationState(a.payer as Hex, a.nonce as Hex);
    if (p.status === 'settled') {
      settledOnLog++;
      settledAmount += BigInt(a.amount);
      if (!used) failures.push(`payment ${a.nonce} settled on the log, no transfer on chain`);
    } else if (used) failures.push(`payment ${a.nonce} is ${p.status} on the log but transferred on chain`);
  }
  let transfers = 0;
  let unrecordedTransfers = 0;
  for (const call of input.paid) {
    const used = await input.chain.authorizationState(input.payer, call.nonce);
    if (used) transfers++;
    if (used && !payOnLogNonces.has(call.nonce.toLowerCase())) unrecordedTransfers++;
  }
  if (unrecordedTransfers > 0)
    failures.push(`${unrecordedTransfers} transfers on chain with no payment on the log`);
  if (transfers !== settledOnLog)
    failures.push(`${settledOnLog} payments settled on the log, ${transfers} transfers on chain`);
  const received = (await input.chain.balanceOf(input.payTo)) - input.payToBefore;
  if (received !== settledAmount)
    failures.push(`seller received ${received} atomic units, the log settled ${settledAmount}`);
  const paidServed = input.paid.filter((c) => c.status === 200);
  const servedUnsettled = paidServed.filter((c) => {
    for (const p of input.payments.values())
      if (p.authorized?.nonce.toLowerCase() === c.nonce.toLowerCase()) return p.status !== 'settled';
    return true;
  }).length;
  if (servedUnsettled > 0) failures.push(`${servedUnsettled} paid calls served without a settled payment`);
  if (paidServed.length === 0) failures.push('no paid call was served');
  const paidByStatus: Record<string, number> = {};
  for (const c of input.paid)
    paidByStatus[String(c.status ?? 'no answer')] = (paidByStatus[String(c.status ?? 'no answer')] ?? 0) + 1;

  // An outage is answered with a retryable 503; a 500 is a bug.
  const internalErrors =
    calls.reduce((sum, c) => sum + ((c.byStatus as Record<string, number>)['500'] ?? 0), 0) +
    (paidByStatus['500'] ?? 0);
  if (internalErrors > 0)
    failures.push(`${internalErrors} calls answered 500 (an outage is a retryable 503)`);

  // Events vs stream messages vs deliveries.
  const relayed = log.filter((e) => RELAYED.has(e.type));
  const onStream = new Set(input.stream);
  const missingOnStream = relayed.filter((e) => !onStream.has(e.id)).length;
  const relayedIds = new Set(relayed.map((e) => e.id));
  const strangersOnStream = [...onStream].filter((id) => !relayedIds.has(id)).length;
  const duplicateMessages = input.stream.length - onStream.size;
  if (missingOnStream > 0) failures.push(`${missingOnStream} relayed events never reached the stream`);
  if (strangersOnStream > 0)
    failures.push(`${strangersOnStream} stream messages that are not relayed events on the log`);
  if (duplicateMessages > 0) failures.push(`${duplicateMessages} duplicate messages on the stream`);

  const attempts = new Map<string, number>();
  const deliveryEvent = new Map<string, string>();
  const successes = new Map<string, number>();
  // An attempt is claimed (DeliveryAttempted), or queued and sent under its queue lease with no
  // claim after it (DeliveryQueued only), or both (queued, then claimed at its turn): counted once.
  // Queued and claimed only once its queue lease ran out (another dispatcher taking it over, the
  // one that queued it killed), it may have been sent under the lease as well: counted twice.
  const queuedAt = new Map<string, number>();
  let sequenced = 0;
  for (const e of log) {
    type AttemptData = { deliveryId?: string; eventId?: string; attempt?: number; queued?: boolean };
    // A first attempt is recorded in its sequence event (`first`), or in older logs by its own event.
    const first = e.type === 'DeliverySequenced' ? (e.data as { first?: AttemptData }).first : undefined;
    const d = first ?? (e.data as AttemptData);
    const type = first ? (first.queued ? 'DeliveryQueued' : 'DeliveryAttempted') : e.type;
    if (type === 'DeliveryAttempted' || type === 'DeliveryQueued') {
      const key = `${d.deliveryId}#${d.attempt}`;
      const queued = queuedAt.get(key);
      const takenOver =
        type === 'DeliveryAttempted' &&
        queued !== undefined &&
        Date.parse(e.recordedAt) - queued >= STUCK_AFTER_MS - 1_000;
      if (queued === undefined || takenOver)
        attempts.set(d.deliveryId!, (attempts.get(d.deliveryId!) ?? 0) + 1);
      queuedAt.set(key, type === 'DeliveryQueued' ? Date.parse(e.recordedAt) : Number.POSITIVE_INFINITY);
      deliveryEvent.set(d.deliveryId!, d.eventId!);
    }
    if (e.type === 'DeliverySucceeded') successes.set(d.deliveryId!, (successes.get(d.deliveryId!) ?? 0) + 1);
    if (e.type === 'DeliverySequenced') sequenced++;
  }
  const deliveredEvents = new Map<string, number>();
  for (const [delivery, eventId] of deliveryEvent)
    if (successes.has(delivery)) deliveredEvents.set(eventId, (deliveredEvents.get(eventId) ?? 0) + 1);
  const expectedIds = new Set(input.expected.map((e) => e.id));
  const undeliveredEvents = input.expected.filter((e) => !deliveredEvents.has(e.id));
  const undelivered = undeliveredEvents.length;
  const attemptedEvents = new Set(deliveryEvent.values());
  const deliveredTwice = [...deliveredEvents.values()].filter((c) => c > 1).length;
  const unexpectedDeliveries = [...deliveredEvents.keys()].filter((id) => !expectedIds.has(id)).length;
  const successesTwice = [...successes.values()].filter((c) => c > 1).length;
  if (undelivered > 0)
    failures.push(
      `${undelivered} matching events never delivered: ${undeliveredEvents
        .slice(0, 10)
        .map(
          (e) =>
            `${e.type} ${e.id} at ${e.position} (${e.recordedAt}; ${onStream.has(e.id) ? 'on the stream' : 'not on the stream'}, ${attemptedEvents.has(e.id) ? 'attempted' : 'never attempted'})`,
        )
        .join('; ')}`,
    );
  if (deliveredTwice > 0) failures.push(`${deliveredTwice} events delivered under two delivery ids`);
  if (unexpectedDeliveries > 0)
    failures.push(`${unexpectedDeliveries} deliveries of events that match nothing`);
  if (successesTwice > 0) failures.push(`${successesTwice} deliveries recorded as succeeded twice`);
  if (sequenced !== deliveryEvent.size)
    failures.push(`${sequenced} sequence numbers for ${deliveryEvent.size} deliveries`);

  const receiptsPer = new Map<string, number>();
  for (const r of input.receipts) receiptsPer.set(r.delivery, (receiptsPer.get(r.delivery) ?? 0) + 1);
  const receivedNotOnLog = [...receiptsPer.keys()].filter(
    (id) => !successes.has(id) && !attempts.has(id),
  ).length;
  const notReceived = [...successes.keys()].filter((id) => !receiptsPer.has(id)).length;
  // A second receipt of one delivery id is a redelivery (an attempt whose outcome was lost with
  // its dispatcher); it is a duplicate only when the receiver got it more often than the log
  // claimed attempts for it.
  const redeliveries = [...receiptsPer.values()].reduce((s, c) => s + c - 1, 0);
  const unclaimedReceipts = [...receiptsPer.entries()].filter(
    ([id, c]) => c > (attempts.get(id) ?? 0),
  ).length;
  if (receivedNotOnLog > 0)
    failures.push(`${receivedNotOnLog} deliveries received that the log never claimed`);
  if (notReceived > 0)
    failures.push(`${notReceived} deliveries the log calls succeeded that the receiver never got`);
  if (unclaimedReceipts > 0)
    failures.push(`${unclaimedReceipts} delivery ids received more often than attempted`);
  const seqs = input.receipts.map((r) => r.seq).filter((s): s is number => s !== null);
  const maxSeq = seqs.length ? Math.max(...seqs) : 0;
  const seqGaps = maxSeq - new Set(seqs).size;
  if (seqGaps > 0) failures.push(`${seqGaps} sequence numbers missing at the receiver (of 1..${maxSeq})`);

  return {
    failures,
    summary: {
      log: { events: log.length, duplicateEventIds: duplicateEvents },
      calls: { ...callTotals, perKey: calls },
      payments: {
        paidCalls: input.paid.length,
        paidByStatus,
        onLog: input.payments.size,
        byState,
        settledOnLog,
        transfersOnChain: transfers,
        transfersWithoutPayment: unrecordedTransfers,
        sellerReceived: received.toString(),
        settledAmount: settledAmount.toString(),
        servedUnsettled,
      },
      events: {
        relayedOnLog: relayed.length,
        streamMessages: input.stream.length,
        missingOnStream,
        duplicateMessages,
        strangersOnStream,
        matchingEvents: input.expected.length,
        deliveries: deliveryEvent.size,
        deliveriesSucceeded: successes.size,
        attempts: [...attempts.values()].reduce((s, c) => s + c, 0),
        undelivered,
        deliveredTwice,
        receipts: input.receipts.length,
        distinctReceived: receiptsPer.size,
        redeliveries,
        unclaimedReceipts,
        seqMax: maxSeq,
        seqGaps,
      },
    },
  };
}

/** Per host: the stretches it was not ready, with the checks that failed. */
function readinessTimeline(samples: Sample[]) {
  const byHost = new Map<string, Sample[]>();
  for (const s of samples) byHost.set(s.host, [...(byHost.get(s.host) ?? []), s]);
  const out: Record<string, { from: number; to: number; failing: string[] }[]> = {};
  for (const [host, list] of byHost) {
    list.sort((a, b) => a.t - b.t);
    const stretches: { from: number; to: number; failing: string[] }[] = [];
    let open: { from: number; to: number; failing: Set<string> } | null = null;
    for (const s of list) {
      if (s.status === 200) {
        if (open) stretches.push({ from: open.from, to: s.t, failing: [...open.failing] });
        open = null;
        continue;
      }
      open ??= { from: s.t, to: s.t, failing: new Set() };
      open.to = s.t;
      for (const f of s.status === 0 ? ['no answer'] : s.failing.map((x) => x.split(':')[0]!))
        open.failing.add(f);
    }
    if (open) stretches.push({ from: open.from, to: open.to, failing: [...open.failing] });
    out[host] = stretches;
  }
  return out;
}

function longestRun(samples: Sample[]): number {
  let longest = 0;
  let start: number | null = null;
  for (const s of [...samples].sort((a, b) => a.t - b.t)) {
    if (s.status !== 200) {
      start ??= s.t;
      longest = Math.max(longest, s.t - start);
    } else start = null;
  }
  return longest;
}

function printReport(
  summary: Record<string, unknown>,
  figures: Awaited<ReturnType<typeof reconcile>>['summary'],
  faults: FaultRecord[],
  failures: string[],
): void {
  const { calls, payments, events, log } = figures;
  const lines = [
    '',
    `reconciliation (${summary.mode} drill, ${summary.seconds} s)`,
    `  log: ${log.events} events, ${log.duplicateEventIds} ids twice`,
    `  keyed calls: ${calls.served} served, ${calls.debited} debited, ${calls.noAnswer} without an answer, ${calls.atRisk} whose commit may lie in the ${600} ms before PostgreSQL was killed (asked before its death, answered after the window opened)`,
    `  paid calls: ${payments.paidCalls} sent ${JSON.stringify(payments.paidByStatus)}; payments on the log ${payments.onLog} ${JSON.stringify(payments.byState)}; settled ${payments.settledOnLog}, transfers on chain ${payments.transfersOnChain}; seller received ${payments.sellerReceived} of ${payments.settledAmount} settled`,
    `  events: ${events.relayedOnLog} relayed on the log, ${events.streamMessages} stream messages (${events.missingOnStream} missing, ${events.duplicateMessages} duplicates)`,
    `  webhooks: ${events.matchingEvents} matching events, ${events.deliveries} deliveries (${events.deliveriesSucceeded} succeeded, ${events.attempts} attempts), ${events.undelivered} undelivered, ${events.deliveredTwice} twice; receiver ${events.receipts} receipts of ${events.distinctReceived} ids (${events.redeliveries} redeliveries, ${events.unclaimedReceipts} unclaimed), seq 1..${events.seqMax} with ${events.seqGaps} gaps`,
    '  faults (recovery = until every role answered /readyz 200):',
    ...faults.map(
      (f) =>
        `    ${f.fault.padEnd(44)} ${String(f.recoveredAfter).padStart(6)} s${f.note ? ` (${f.note})` : ''}  ${Object.entries(
          f.effects,
        )
          .map(([h, e]) => `${h} ${e.notReadyFor} s [${e.failing.join(',')}]`)
          .join('; ')}`,
    ),
    failures.length === 0 ? 'PASS: every count reconciled' : `FAIL:\n  - ${failures.join('\n  - ')}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

// ---------------------------------------------------------------------------------------------

try {
  process.exitCode = await main();
} catch (err) {
  say(`FAIL: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exitCode = 1;
} finally {
  // A failed drill keeps its files (never its processes or namespaces) for a look.
  cleanup(args.keep || process.exitCode === 1);
  const left = (net as DrillNet | null)?.leftovers() ?? [];
  if (left.length > 0) {
    say(`left behind: ${left.join(', ')}`);
    process.exitCode = 1;
  }
}
// The chain's HTTP keep-alive sockets and the like must not hold the run open.
setTimeout(() => process.exit(), 1_000).unref();
