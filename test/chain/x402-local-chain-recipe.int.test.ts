import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { decodePaymentResponseHeader, wrapFetchWithPayment } from '@x402/fetch';
import { pino } from 'pino';
import { createPublicClient, type Hex, http } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { type RunningService, startService } from '../../services/service.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** Runs the README's recipe script and reads the settings it prints, up to its `# ready` line. */
async function startRecipe(): Promise<{ child: ChildProcess; settings: Record<string, string> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/x402-local-chain.ts'], {
    cwd: ROOT,
    env: { ...process.env, BLOCK_TIME: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('# ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the recipe exited ${code}: ${err}`)));
  });
  const settings = Object.fromEntries(
    out
      .split('\n')
      .filter((line) => /^[A-Z0-9_]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
  return { child, settings };
}

describe('the local chain recipe (scripts/x402-local-chain.ts)', () => {
  let recipe: Awaited<ReturnType<typeof startRecipe>>;
  let dir: string;
  let service: RunningService;

  beforeAll(async () => {
    recipe = await startRecipe();
    dir = await mkdtemp(join(tmpdir(), 'x402-recipe-'));
    const { X402_PAY_TO, X402_FACILITATOR_PRIVATE_KEY, X402_RPC_URL, X402_ASSET } = recipe.settings;
    service = await startService(
      loadConfig({
        DATA_DIR: dir,
        PORT: '0',
        HOST: '127.0.0.1',
        FEED: 'replay',
        REPLAY_SPEED: '0',
        X402_PAY_TO: X402_PAY_TO!,
        X402_FACILITATOR_PRIVATE_KEY: X402_FACILITATOR_PRIVATE_KEY!,
        X402_RPC_URL: X402_RPC_URL!,
        X402_ASSET: X402_ASSET!,
      }),
      ['api'],
      pino({ level: 'silent' }),
    );
  });
  afterAll(async () => {
    await service?.stop();
    if (recipe && recipe.child.exitCode === null) {
      const exited = new Promise((resolve) => recipe.child.once('exit', resolve));
      recipe.child.kill('SIGTERM');
      await exited;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('prints what the service and a payer need: an official client pays a call, settled on that chain', async () => {
    const { PAYER_PRIVATE_KEY, PAYER_ADDRESS, X402_RPC_URL, X402_ASSET, X402_PAY_TO } = recipe.settings;
    const chain = createPublicClient({ transport: http(X402_RPC_URL) });
    const balanceOf = (account: string) =>
      chain.readContract({
        address: X402_ASSET as Hex,
        abi: [
          {
            type: 'function',
            name: 'balanceOf',
            stateMutability: 'view',
            inputs: [{ name: 'account', type: 'address' }],
            outputs: [{ type: 'uint256' }],
          },
        ],
        functionName: 'balanceOf',
        args: [account as Hex],
      });
    expect(await balanceOf(PAYER_ADDRESS!)).toBe(10_000_000n);

    const client = new x402Client();
    registerExactEvmScheme(client, { signer: privateKeyToAccount(PAYER_PRIVATE_KEY as Hex) });
    const res = await wrapFetchWithPayment(fetch, client)(`${service.url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '1h' }),
    });
    const body = (await res.json()) as { regime?: string };
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body.regime).toEqual(expect.any(String));
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    expect(receipt).toMatchObject({ success: true, network: 'eip155:8453', payer: PAYER_ADDRESS });
    const mined = await chain.waitForTransactionReceipt({ hash: receipt.transaction as Hex });
    expect(mined.status).toBe('success');
    expect(await balanceOf(PAYER_ADDRESS!)).toBe(10_000_000n - 20_000n);
    expect(await balanceOf(X402_PAY_TO!)).toBe(20_000n);

    // A chain that mines on its own timer is reported fresh: the chain check is present and not degraded.
    const ready = await fetch(`${service.url}/readyz`);
    const checks = ((await ready.json()) as { checks: Record<string, { ok: boolean; degraded?: boolean }> })
      .checks;
    expect(checks.chain).toMatchObject({ ok: true });
    expect(checks.chain?.degraded).toBeUndefined();
  });
});
