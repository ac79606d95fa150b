import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { type RunningService, startService } from '../../services/service.ts';
import { BASE_USDC, FACILITATOR_KEY, type LocalChain, startLocalChain } from './local-chain.ts';

interface Readyz {
  status: string;
  checks: Record<string, { ok: boolean; detail?: string; networks?: { network: string; block?: number }[] }>;
}

async function readyz(service: RunningService): Promise<{ status: number; body: Readyz }> {
  const res = await fetch(`${service.url}/readyz`);
  return { status: res.status, body: (await res.json()) as Readyz };
}

// anvil mines only on a transaction or when told to: a chain that answers every call and
// makes no block, as a halted sequencer looks from its RPC.
describe('readiness while the chain the payments settle on stops making blocks', () => {
  let chain: LocalChain;
  let dir: string;
  let service: RunningService;

  beforeAll(async () => {
    chain = await startLocalChain();
    dir = await mkdtemp(join(tmpdir(), 'x402-chain-ready-'));
    service = await startService(
      loadConfig({
        DATA_DIR: dir,
        PORT: '0',
        HOST: '127.0.0.1',
        FEED: 'replay',
        REPLAY_SPEED: '0',
        X402_PAY_TO: privateKeyToAccount(generatePrivateKey()).address,
        X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
        X402_RPC_URL: chain.rpcUrl,
        X402_ASSET: BASE_USDC,
        X402_CHAIN_STALL_MS: '3000',
      }),
      ['api'],
      pino({ level: 'silent' }),
    );
  });
  afterAll(async () => {
    await service?.stop();
    await chain?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('answers 503 naming the chain once no block came for X402_CHAIN_STALL_MS, and 200 again once one does', async () => {
    await chain.testClient.mine({ blocks: 1 });
    const head = Number(await chain.publicClient.getBlockNumber());
    const ready = await readyz(service);
    expect(ready.status, JSON.stringify(ready.body)).toBe(200);
    expect(ready.body.checks.chain).toMatchObject({
      ok: true,
      networks: [{ network: 'eip155:8453', block: head }],
    });

    // No block from here: the RPC keeps answering, the head ages past the threshold.
    await expect
      .poll(async () => (await readyz(service)).status, { timeout: 30_000, interval: 250 })
      .toBe(503);
    const stalled = await readyz(service);
    expect(stalled.body.checks.chain).toMatchObject({ ok: false });
    expect(stalled.body.checks.chain!.detail).toMatch(
      new RegExp(`^eip155:8453: no new block for \\d+ s \\(block ${head}, X402_CHAIN_STALL_MS 3000\\)`),
    );
    // Only the chain: every other dependency is well.
    for (const [name, check] of Object.entries(stalled.body.checks)) {
      if (name !== 'chain') expect(check.ok, name).toBe(true);
    }

    await chain.testClient.mine({ blocks: 1 });
    const again = await readyz(service);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.checks.chain).toMatchObject({ ok: true, networks: [{ block: head + 1 }] });
  });
});
