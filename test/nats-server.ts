import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePort } from './ports.ts';

/** The shared NATS the tests talk to unless told otherwise. */
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

/** True when something at `url` answers with a NATS INFO line. */
async function natsReachable(url: string, timeoutMs = 2_000): Promise<boolean> {
  const { hostname, port } = new URL(url.replace(/^nats:/, 'http:'));
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.once('data', (chunk) => done(chunk.toString().startsWith('INFO ')));
    socket.connect(Number(port || 4222), hostname);
  });
}

/**
 * Decides whether a NATS-backed suite runs: under CI=true an unreachable server is an error (the
 * suite must fail, never skip); elsewhere the suite is skipped with a loud warning.
 */
export async function requireNats(url: string = NATS_URL): Promise<boolean> {
  if (await natsReachable(url)) return true;
  if (process.env.CI === 'true') throw new Error(`NATS is unreachable at ${url} and CI=true: failing`);
  console.warn(
    `\n*** NATS unreachable at ${url}: SKIPPING the NATS suites (set CI=true to fail instead) ***\n`,
  );
  return false;
}

/** Servers this process started and has not stopped: killed when it exits, on any path. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** The machine's nats-server, for suites that start their own; see requireNatsBinary. */
export const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';

/**
 * Decides whether a suite that starts its own nats-server runs: under CI=true a missing binary is
 * an error (the suite must fail, never skip); elsewhere it is skipped with a loud warning.
 */
export function requireNatsBinary(what: string, binary: string = NATS_SERVER_BIN): boolean {
  if (existsSync(binary)) return true;
  if (process.env.CI === 'true')
    throw new Error(`nats-server binary missing at ${binary} and CI=true: failing`);
  console.warn(`\n*** nats-server missing at ${binary}: SKIPPING ${what} ***\n`);
  return false;
}

/**
 * Spawns nats-server with `args` and resolves once it logs that it is ready; it is killed when
 * this process exits, on any path.
 */
export async function launchNatsServer(
  binary: string,
  args: string[],
  readyTimeoutMs: number,
): Promise<ChildProcess> {
  let log = '';
  const proc = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`nats-server not ready within ${readyTimeoutMs} ms:\n${log}`));
    }, readyTimeoutMs);
    const onData = (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes('Server is ready')) {
        clearTimeout(timer);
        resolve();
      }
    };
    proc.stdout?.on('data', onData);
    proc.stderr?.on('data', onData);
    proc.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited early (code ${code}, signal ${signal}):\n${log}`));
    });
  });
  return proc;
}

export interface PrivateNatsServer {
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** Kills the server (SIGKILL by default: no clean shutdown) and waits for it to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and store directory. */
  restart(): Promise<void>;
  /** Kills it and removes the store directory. */
  dispose(): Promise<void>;
}

/** Spawns a private JetStream-enabled nats-server on a free loopback port with its own store. */
export async function startNatsServer(
  options: { binary?: string; readyTimeoutMs?: number } = {},
): Promise<PrivateNatsServer> {
  const binary = options.binary ?? NATS_SERVER_BIN;
  const readyTimeoutMs = options.readyTimeoutMs ?? 20_000;
  const port = await freePort();
  const storeDir = await mkdtemp(join(tmpdir(), 'nats-js-'));
  let child: ChildProcess | null = null;

  const launch = async () => {
    child = await launchNatsServer(
      binary,
      ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir],
      readyTimeoutMs,
    );
  };

  const kill = async (signal: NodeJS.Signals = 'SIGKILL') => {
    const proc = child;
    child = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };

  await launch();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    kill,
    restart: launch,
    dispose: async () => {
      await kill();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}

/** Deletes a stream through its own connection, so it works even after the bus was closed. */
export async function deleteStream(stream: string): Promise<void> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(stream).catch(() => false);
  } finally {
    await nc.close();
  }
}

/**
 * The message id (Nats-Msg-Id: the relay sets the event id) of every message on `stream`, in
 * stream order, read with an ordered consumer. `servers`: one URL or a cluster's, comma-separated.
 */
export async function streamMessageIds(stream: string, servers: string = NATS_URL): Promise<string[]> {
  const nc = await connect({ servers: servers.split(','), timeout: 5_000 });
  try {
    const info = await (await jetstreamManager(nc)).streams.info(stream);
    const ids: string[] = [];
    if (info.state.messages === 0) return ids;
    const messages = await (await jetstream(nc).consumers.get(stream)).consume();
    for await (const m of messages) {
      ids.push(m.headers?.get('Nats-Msg-Id') ?? '');
      if (m.info.pending === 0) break;
    }
    return ids;
  } finally {
    await nc.close();
  }
}

/** Whether a durable consumer of `stream` has nothing left to deliver and nothing awaiting its ack. */
export async function consumerDrained(stream: string, durable: string): Promise<boolean> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const info = await (await jetstreamManager(nc)).consumers.info(stream, durable);
    return info.num_pending === 0 && info.num_ack_pending === 0;
  } finally {
    await nc.close();
  }
}
