import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { createChainReader } from '../../services/payments/chain-reader.ts';
import { ChainHeads, HEAD_POLL_MS } from '../../services/payments/chain-readiness.ts';
import { type RunningService, startService } from '../../services/service.ts';
import { BASE_USDC, FACILITATOR_KEY, type LocalChain, startLocalChain } from './local-chain.ts';
import { countingRpcRelay, type RpcRelay } from './rpc-relay.ts';

interface ChainCheck {
  ok: boolean;
  degraded?: boolean;
  detail?: string;
  networks?: { network: string; block?: number; ageS: number; stale: boolean }[];
}
interface Readyz {
  status: string;
  checks: Record<string, ChainCheck>;
}

async function readyz(service: RunningService): Promise<{ status: number; body: Readyz }> {
  const res = await fetch(`${service.url}/readyz`);
  return { status: res.status, body: (await res.json()) as Readyz };
}

async function headAgeMetric(service: RunningService): Promise<number | undefined> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  const m = /^x402_chain_head_age_seconds\{network="eip155:8453"\} ([\d.e+-]+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

// anvil mines only on a transaction or when told to: a chain that answers every call and
// makes no block, as a halted sequencer looks from its RPC.
describe('readiness while the chain the payments settle on stops making blocks', () => {
  let chain: LocalChain;
  let proxy: RpcRelay;
  /** The latest-block reads (eth_getBlockByNumber) the relay carried. */
  const headReads = () => proxy.calls.get('eth_getBlockByNumber') ?? 0;
  let dir: string;
  let service: RunningService;

  beforeAll(async () => {
    chain = await startLocalChain();
    proxy = await countingRpcRelay(chain.rpcUrl);
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
        X402_RPC_URL: proxy.url,
        X402_ASSET: BASE_USDC,
        X402_CHAIN_STALL_MS: '3000',
      }),
      ['api'],
      pino({ level: 'silent' }),
    );
  });
  afterAll(async () => {
    await service?.stop();
    await proxy?.close();
    await chain?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('stays ready while the chain is stalled, reporting it stale (body and metric), and probes do not read the chain', async () => {
    await chain.testClient.mine({ blocks: 1 });
    const head = Number(await chain.publicClient.getBlockNumber());
    // The poller sees the new block within a poll.
    await expect
      .poll(async () => (await readyz(service)).body.checks.chain?.networks?.[0]?.block, { timeout: 15_000 })
      .toBe(head);
    const fresh = await readyz(service);
    expect(fresh.status, JSON.stringify(fresh.body)).toBe(200);
    expect(fresh.body.checks.chain).toMatchObject({
      ok: true,
      networks: [{ network: 'eip155:8453', stale: false }],
    });
    expect(fresh.body.checks.chain!.degraded).toBeUndefined();

    // No block from here: the RPC keeps answering, the head stops moving past the threshold.
    await expect
      .poll(async () => (await readyz(service)).body.checks.chain?.degraded, {
        timeout: 30_000,
        interval: 250,
      })
      .toBe(true);
    const stalled = await readyz(service);
    expect(stalled.status, JSON.stringify(stalled.body)).toBe(200);
    expect(stalled.body.status).toBe('ready');
    expect(stalled.body.checks.chain).toMatchObject({
      ok: true,
      degraded: true,
      networks: [{ network: 'eip155:8453', block: head, stale: true }],
    });
    // Stale once past 3,000 ms; the body rounds the age to a tenth (3.0 s at 3,020 ms).
    expect(stalled.body.checks.chain!.networks![0]!.ageS).toBeGreaterThanOrEqual(3);
    expect(stalled.body.checks.chain!.detail).toMatch(
      new RegExp(
        `^eip155:8453: stale, no new block seen for \\d+ s \\(block ${head}, X402_CHAIN_STALL_MS 3000\\)`,
      ),
    );
    expect(await headAgeMetric(service)).toBeGreaterThanOrEqual(3);

    // Probes read the cached state: a burst of them costs the RPC no more than the poller's reads.
    const before = headReads();
    const started = performance.now();
    for (let i = 0; i < 10; i++) {
      const answers = await Promise.all(Array.from({ length: 10 }, () => readyz(service)));
      for (const answer of answers) expect(answer.status).toBe(200);
    }
    const polls = Math.floor((performance.now() - started) / HEAD_POLL_MS) + 2;
    expect(headReads() - before, `100 probes, room for ${polls} polls`).toBeLessThanOrEqual(polls);

    await chain.testClient.mine({ blocks: 1 });
    await expect
      .poll(async () => (await readyz(service)).body.checks.chain?.networks?.[0]?.block, { timeout: 15_000 })
      .toBe(head + 1);
    const again = await readyz(service);
    expect(again.status).toBe(200);
    expect(again.body.checks.chain).toMatchObject({
      ok: true,
      networks: [{ block: head + 1, stale: false }],
    });
    expect(again.body.checks.chain!.degraded).toBeUndefined();
    expect(await headAgeMetric(service)).toBeLessThan(3);
  });

  it('a stop and start while a read is out leaves one poller per rail, not two', async () => {
    const pollMs = 500;
    const heads = new ChainHeads(new Map([['eip155:8453', createChainReader(proxy.url)]]), 3000, pollMs);
    try {
      heads.start();
      heads.stop(); // the first read is still out: it must not go on polling beside the next start's
      heads.start();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const before = headReads();
      const started = performance.now();
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      const elapsed = performance.now() - started;
      // This poller's reads, and the started service's own poller's (same proxy, every HEAD_POLL_MS).
      const polls = Math.floor(elapsed / pollMs) + 1 + Math.floor(elapsed / HEAD_POLL_MS) + 1;
      expect(headReads() - before, `one poller: at most ${polls} reads`).toBeLessThanOrEqual(polls);
    } finally {
      heads.stop();
    }
  });
});
