import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { launchNatsServer, NATS_SERVER_BIN } from './nats-server.ts';
import { freePort } from './ports.ts';

export interface NatsClusterNode {
  readonly name: string;
  readonly port: number;
  readonly running: boolean;
}

export interface NatsCluster {
  /** Every node's client URL, comma-separated, as NATS_URL takes them. */
  readonly url: string;
  readonly nodes: readonly NatsClusterNode[];
  /**
   * SIGKILLs the named node (no clean shutdown) and waits for it to exit; with SIGTERM it shuts
   * down cleanly and tells the cluster so, and the meta leader counts it offline at once.
   */
  kill(name: string, signal?: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  /** Starts the named node again on its ports and store directory. */
  restart(name: string): Promise<void>;
  /** The server name of the stream's RAFT leader, or null while there is none. */
  streamLeader(stream: string): Promise<string | null>;
  /** Kills every node and removes the store directories; safe to call more than once. */
  dispose(): Promise<void>;
}

interface Node extends NatsClusterNode {
  child: ChildProcess | null;
  configFile: string;
}

/**
 * Spawns a JetStream cluster of `size` nats-server processes on loopback (random free ports, one
 * temporary store directory) and resolves once its meta leader answers JetStream API calls.
 */
export async function startNatsCluster(
  options: { size?: number; binary?: string; readyTimeoutMs?: number } = {},
): Promise<NatsCluster> {
  const size = options.size ?? 3;
  const binary = options.binary ?? NATS_SERVER_BIN;
  // Generous: a loaded 2-core machine can take seconds to start a node and elect the meta leader.
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  const dir = await mkdtemp(join(tmpdir(), 'nats-cluster-'));
  const clientPorts = await distinctPorts(size * 2);
  const nodes: Node[] = Array.from({ length: size }, (_, i) => ({
    name: `n${i + 1}`,
    port: clientPorts[i]!,
    child: null,
    configFile: join(dir, `n${i + 1}.conf`),
    get running() {
      return this.child !== null;
    },
  }));
  const routePorts = clientPorts.slice(size);
  for (const [i, node] of nodes.entries()) {
    const routes = routePorts.map((p) => `"nats-route://127.0.0.1:${p}"`).join(', ');
    await writeFile(
      node.configFile,
      [
        `server_name: ${node.name}`,
        `listen: "127.0.0.1:${node.port}"`,
        `jetstream { store_dir: "${join(dir, node.name)}" }`,
        `cluster { name: "c1", listen: "127.0.0.1:${routePorts[i]}", routes: [${routes}] }`,
        '',
      ].join('\n'),
    );
  }

  const launch = async (node: Node) => {
    const proc = await launchNatsServer(binary, ['-c', node.configFile], readyTimeoutMs);
    node.child = proc;
    proc.once('exit', () => {
      if (node.child === proc) node.child = null;
    });
  };

  const kill = async (node: Node, signal: 'SIGKILL' | 'SIGTERM' = 'SIGKILL') => {
    const proc = node.child;
    if (!proc) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    await exited;
    node.child = null;
  };

  const url = nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(',');
  const dispose = async () => {
    await Promise.all(nodes.map((node) => kill(node)));
    await rm(dir, { recursive: true, force: true });
  };

  try {
    await Promise.all(nodes.map(launch));
    await untilJetStreamAnswers(url, readyTimeoutMs);
  } catch (err) {
    await dispose();
    throw err;
  }

  const byName = (name: string) => {
    const node = nodes.find((n) => n.name === name);
    if (!node) throw new Error(`no node ${name} in the cluster`);
    return node;
  };
  return {
    url,
    nodes,
    kill: (name, signal) => kill(byName(name), signal),
    restart: (name) => launch(byName(name)),
    async streamLeader(stream) {
      const nc = await connect({ servers: url, timeout: 2_000 });
      try {
        const info = await (await jetstreamManager(nc, { timeout: 2_000 })).streams.info(stream);
        return info.cluster?.leader ?? null;
      } catch {
        return null;
      } finally {
        await nc.close();
      }
    },
    dispose,
  };
}

/** Free ports, each different: freePort alone could hand the same one out twice. */
async function distinctPorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/** The cluster is usable once JetStream (its meta leader) answers an account info request. */
async function untilJetStreamAnswers(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  while (Date.now() < deadline) {
    try {
      const nc = await connect({ servers: url, timeout: 2_000 });
      try {
        await (await jetstreamManager(nc, { timeout: 2_000 })).getAccountInfo();
        return;
      } finally {
        await nc.close();
      }
    } catch (err) {
      last = err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  throw new Error(`JetStream cluster not ready within ${timeoutMs} ms: ${String(last)}`);
}
