import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BASE_USDC, FACILITATOR_KEY } from './chain/local-chain.ts';
import { freshAuthorization, fromBase64Json, signAuthorization, v2Header } from './chain/x402-auth.ts';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

/**
 * A chain RPC that refuses every call (429, as the public https://mainnet.base.org does when
 * rate-limited) under an unpaid request carrying a junk signature. @x402/evm's verify starts the
 * asset's eth_getCode, returns early on the bad signature, and never awaits that check: its
 * rejection is nobody's. It must not end the process (only a real process shows it: vitest
 * reports an unhandled rejection of its own workers itself).
 */
let rpc: Server;
let rpcCalls = 0;
/**
 * 'refuse': every call answers 429. 'asset-refused': eth_getCode answers (no code) except for the
 * asset, the rest 429. 'calls-refused': eth_getCode answers (the asset has code), the rest 429.
 */
let rpcMode: 'refuse' | 'asset-refused' | 'calls-refused' = 'refuse';
let dir: string;
let service: ServiceProcess;
let url: string;
let accepted: Record<string, unknown>;
const PATH = '/x402/get_market_regime';
const BODY = JSON.stringify({ coin: 'ETH', timeframe: '1h' });

function pay(header?: string) {
  return fetch(`${url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(header ? { 'payment-signature': header } : {}) },
    body: BODY,
  });
}

/** A v2 payment header, signed by the payer's key or (`forged`) by another key for its address. */
async function payment(forged: boolean): Promise<string> {
  const key = generatePrivateKey();
  const from = forged ? privateKeyToAccount(generatePrivateKey()).address : privateKeyToAccount(key).address;
  const auth = freshAuthorization(accepted.payTo as Hex, from, BigInt(accepted.amount as string));
  const extra = accepted.extra as { name: string; version: string };
  const domain = {
    name: extra.name,
    version: extra.version,
    chainId: Number(String(accepted.network).split(':')[1]),
    verifyingContract: accepted.asset as Hex,
  };
  return v2Header(accepted, auth, await signAuthorization(key, auth, domain));
}

beforeAll(async () => {
  rpc = createServer((req, res) => {
    rpcCalls++;
    let raw = '';
    req.on('data', (chunk: Buffer) => {
      raw += chunk.toString();
    });
    req.on('end', () => {
      const call = JSON.parse(raw) as { id: number; method: string; params: unknown[] };
      const isAsset = String(call.params[0]).toLowerCase() === BASE_USDC.toLowerCase();
      const answers =
        call.method === 'eth_getCode' &&
        (rpcMode === 'calls-refused' || (rpcMode === 'asset-refused' && !isAsset));
      if (answers) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: isAsset ? '0x6080' : '0x' }));
        return;
      }
      // Retry-After 0: viem retries at once rather than backing off about 1 s per call.
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '0' });
      res.end(
        JSON.stringify({ jsonrpc: '2.0', id: call.id, error: { code: -32005, message: 'rate limited' } }),
      );
    });
  });
  await new Promise<void>((resolve) => rpc.listen(0, '127.0.0.1', resolve));
  dir = await mkdtemp(join(tmpdir(), 'x402-rpc-refused-'));
  service = runServiceProcess({
    DATA_DIR: dir,
    REPLAY_SPEED: '0',
    X402_PAY_TO: privateKeyToAccount(generatePrivateKey()).address,
    X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
    X402_RPC_URL: `http://127.0.0.1:${(rpc.address() as AddressInfo).port}`,
    X402_ASSET: BASE_USDC,
  });
  const exited = service.exit.then((code) => `exited ${code}: ${service.stderr}`);
  while (!service.lines.some((l) => l.msg === 'service started')) {
    const early = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 50))]);
    if (early) throw new Error(`service ${early}`);
  }
  url = service.lines.find((l) => l.msg === 'service started')!.url as string;
  const quote = await pay();
  expect(quote.status).toBe(402);
  accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(quote.headers.get('payment-required'))
    .accepts[0]!;
});

afterAll(async () => {
  service?.child.kill('SIGKILL');
  await service?.exit;
  await new Promise((resolve) => rpc?.close(resolve));
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The answer's status and body; a 402 (x402's shape) repeats its message as `error`. */
async function answer(res: Response) {
  const body = (await res.json()) as Record<string, unknown>;
  if (res.status === 402) expect(body.error).toBe(body.message);
  return { status: res.status, ...body };
}

describe('a paid call while the chain RPC refuses calls', () => {
  const UNAVAILABLE = {
    status: 503,
    code: 'facilitator_unavailable',
    retryable: true,
    message: 'the payment could not be verified right now; nothing was charged, retry shortly',
  };

  it('answers a payment it cannot check 503, and the process lives on', async () => {
    // The payer's code cannot be read, so the signature cannot be checked: not the payer's fault.
    const res = await pay(await payment(true));
    expect(await answer(res)).toMatchObject(UNAVAILABLE);
    expect(rpcCalls).toBeGreaterThan(0);
    // The asset check the verify left behind fails (after viem's retries): the guard logs it at
    // warn, where without it the process ends.
    const stray = (async () => {
      while (!service.lines.some((l) => l.level === 40 && /stray rejection/.test(String(l.msg)))) {
        await new Promise((r) => setTimeout(r, 50));
      }
      return 'alive';
    })();
    expect(await Promise.race([service.exit.then((code) => `exited ${code}`), stray])).toBe('alive');
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it("does not blame a well-signed payment for the payer's unreadable code: 503, not a bad signature", async () => {
    // @x402/evm's verifyHashSignature answers false when the payer's code cannot be read; the
    // facilitator wrapper sees the transport failure under it and says the chain could not be read.
    const res = await pay(await payment(false));
    expect(await answer(res)).toMatchObject(UNAVAILABLE);
  });

  it('answers a well-signed payment 503 facilitator_unavailable when the awaited asset check fails', async () => {
    rpcMode = 'asset-refused';
    const res = await pay(await payment(false));
    expect(await answer(res)).toMatchObject(UNAVAILABLE);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it('answers a well-signed payment whose simulation (eth_call) the RPC refuses 503, not a failed simulation', async () => {
    rpcMode = 'calls-refused';
    const res = await pay(await payment(false));
    expect(await answer(res)).toMatchObject(UNAVAILABLE);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect(service.child.exitCode).toBeNull();
  });
});
