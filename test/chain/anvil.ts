import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { freePort } from '../ports.ts';

/**
 * A local anvil node, spawned from the binary the @foundry-rs/anvil package ships (not through
 * its npm wrapper, so that killing the child really stops the node).
 */
export interface Anvil {
  rpcUrl: string;
  port: number;
  chainId: number;
  stop(): Promise<void>;
}

const require = createRequire(import.meta.url);

function anvilBinary(): string {
  const arch = process.arch === 'x64' ? 'amd64' : process.arch;
  const pkg = `@foundry-rs/anvil-${process.platform}-${arch}`;
  return join(dirname(require.resolve(`${pkg}/package.json`)), 'bin', 'anvil');
}

export async function startAnvil(
  options: { chainId?: number; blockTime?: number; host?: string } = {},
): Promise<Anvil> {
  const chainId = options.chainId ?? 8453;
  // Loopback unless told: the fault drill's hosts (network namespaces) reach it on a bridge address.
  const host = options.host ?? '127.0.0.1';
  const port = await freePort();
  // Without a block time anvil mines each transaction at once; with one it mines on a timer, as Base does.
  const mining = options.blockTime === undefined ? [] : ['--block-time', String(options.blockTime)];
  const child: ChildProcess = spawn(
    anvilBinary(),
    ['--port', String(port), '--host', host, '--chain-id', String(chainId), '--silent', ...mining],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const rpcUrl = `http://${host}:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`anvil exited with ${child.exitCode}: ${stderr}`);
    try {
      const res = await fetch(rpcUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      });
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`anvil did not answer on ${rpcUrl}: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    rpcUrl,
    port,
    chainId,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
}
