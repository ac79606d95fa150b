import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import type { EventData } from '../../contracts/events.ts';
import { PaymentLedger } from './ledger.ts';
import { LEDGER_COLUMNS } from './ledger-report.ts';
import { usdc } from './usdc.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'payments-ledger-'));
const dataDir = join(root, 'data');

const PAYER = '0x1111111111111111111111111111111111111111';
const PAY_TO = '0x2222222222222222222222222222222222222222';
const ASSET = '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
const tx = (n: number) => `0x${n.toString(16).padStart(64, '0')}` as `0x${string}`;
const nonce = (n: number) => `0x${(0xa0 + n).toString(16).padStart(64, '0')}`;

function authorisation(n: number, amount: string, tool: string): EventData<'PaymentAuthorized'> {
  return {
    nonce: nonce(n),
    network: 'eip155:84532',
    asset: ASSET,
    payer: PAYER,
    payTo: PAY_TO,
    amount,
    resource: `http://127.0.0.1/x402/${tool}`,
    x402Version: 2,
    validAfter: '0',
    validBefore: '9999999999',
    requestId: `req-${n}`,
    tool,
    ...(n === 1 ? { paymentId: 'pay_0001' } : {}),
  };
}

/** The CLI as the operator runs it (`npm run keys -- payments …`), on this test's log. */
async function payments(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', 'services/operator/cli.ts', 'payments', ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH, DATA_DIR: dataDir } },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const { code, stdout, stderr } = err as { code: number; stdout: string; stderr: string };
    return { code, stdout, stderr };
  }
}

describe('the payments ledger (npm run keys -- payments)', () => {
  beforeAll(async () => {
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const ledger = new PaymentLedger(store);
    const reserve = async (n: number, amount: string, tool: string) => {
      const reserved = await ledger.reserve(authorisation(n, amount, tool));
      if (!reserved.ok) throw new Error(reserved.message);
      return reserved.handle;
    };
    // 1: handed off, served, settled by its request.
    const settled = await reserve(1, '20000', 'get_market_regime');
    await ledger.transition(settled, {
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      answer: { ok: 1 },
    });
    await ledger.transition(settled, { kind: 'serve', requestId: 'req-1' });
    await ledger.transition(settled, { kind: 'settle', payer: PAYER, amount: '20000', txHash: tx(1) });
    // 2: settled by the reconciler.
    const reconciled = await reserve(2, '50000', 'get_trade_call');
    await ledger.transition(reconciled, {
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      txHash: tx(2),
    });
    await ledger.transition(reconciled, { kind: 'serve', requestId: 'req-2' });
    await ledger.transition(reconciled, {
      kind: 'settle',
      payer: PAYER,
      amount: '50000',
      txHash: tx(2),
      reconciled: true,
    });
    // 3: served, then the settlement failed: the seller's loss, with a reason holding a comma.
    const lost = await reserve(3, '50000', 'get_trade_call');
    await ledger.transition(lost, {
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      answer: { ok: 3 },
    });
    await ledger.transition(lost, { kind: 'serve', requestId: 'req-3' });
    await ledger.transition(lost, {
      kind: 'fail',
      reason: 'reverted: "transfer amount exceeds balance", nonce used',
      sellerLoss: true,
    });
    // 6: settled by the payer's own transaction before any request: never served, a refund due.
    const unserved = await reserve(6, '40000', 'get_trade_call');
    await ledger.transition(unserved, {
      kind: 'settle',
      payer: PAYER,
      amount: '40000',
      txHash: tx(6),
      reconciled: true,
    });
    // 4: released (the tool failed before anything was sold).
    const released = await reserve(4, '20000', 'get_market_regime');
    await ledger.transition(released, { kind: 'release', reason: 'tool_failed' });
    // 5: released (its tool failed), then reserved again by a later request, still open: one
    // row, the new reservation's, with nothing of the release.
    const again = await reserve(5, '30000', 'scan_trade_calls');
    await ledger.transition(again, { kind: 'release', reason: 'tool_failed' });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = await ledger.reserve({
      ...authorisation(5, '30000', 'scan_trade_calls'),
      requestId: 'req-5b',
    });
    if (!second.ok) throw new Error(second.message);
    // A payment id's claim stream is not a payment.
    await ledger.claim(await ledger.readClaim(PAYER, 'pay_0001'), {
      nonce: nonce(1),
      network: 'eip155:84532',
      asset: ASSET,
      payer: PAYER,
      paymentId: 'pay_0001',
      fingerprint: 'a'.repeat(64),
      tool: 'get_market_regime',
    });
    await store.close();
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('lists every payment once, in the order authorised, with status, amount and transaction', async () => {
    const { code, stdout } = await payments('--format', 'ndjson');
    expect(code).toBe(0);
    const rows = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(
      rows.map((r) => [r.nonce, r.status, r.served, r.amount_usdc, r.tx_hash, r.reconciled, r.seller_loss]),
    ).toEqual([
      [nonce(1), 'settled', true, '0.020000', tx(1), false, false],
      [nonce(2), 'settled', true, '0.050000', tx(2), true, false],
      [nonce(3), 'failed', true, '0.050000', null, false, true],
      [nonce(6), 'settled', false, '0.040000', tx(6), true, false],
      [nonce(4), 'released', false, '0.020000', null, false, false],
      [nonce(5), 'authorized', false, '0.030000', null, false, false],
    ]);
    expect(rows[0]).toMatchObject({
      tool: 'get_market_regime',
      payer: PAYER,
      pay_to: PAY_TO,
      network: 'eip155:84532',
      amount_atomic: '20000',
      payment_id: 'pay_0001',
      request_id: 'req-1',
    });
    expect(rows[4].reason).toBe('tool_failed');
    expect(rows[5]).toMatchObject({ closed_at: null, reason: null, request_id: 'req-5b' });
    expect(Date.parse(rows[5].authorized_at)).toBeGreaterThan(Date.parse(rows[4].authorized_at));
    expect(Date.parse(rows[0].closed_at)).toBeGreaterThanOrEqual(Date.parse(rows[0].authorized_at));
    expect(Object.keys(rows[0])).toEqual([...LEDGER_COLUMNS]);
  });

  it('writes CSV a spreadsheet reads: a header, one line per payment, quoted where needed', async () => {
    const { code, stdout } = await payments('--format', 'csv', '--status', 'failed');
    expect(code).toBe(0);
    const [header, ...lines] = stdout.trim().split('\n');
    expect(header).toBe(LEDGER_COLUMNS.join(','));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`,"reverted: ""transfer amount exceeds balance"", nonce used",`);
  });

  it('sums per status by default, revenue being what settled', async () => {
    const { code, stdout } = await payments();
    expect(code).toBe(0);
    expect(stdout).toMatch(/^settled\s+3\s+0\.110000 USDC$/m);
    expect(stdout).toMatch(/^failed\s+1\s+0\.050000 USDC$/m);
    expect(stdout).toMatch(/^authorized\s+1\s+0\.030000 USDC$/m);
    expect(stdout).toContain(
      '6 payments; revenue (settled): 0.110000 USDC; open (authorized or pending): 0.030000 USDC; answers served and never paid: 1; paid and never served (refund due): 1, 0.040000 USDC',
    );
  });

  it('filters by the time authorised: --from inclusive, --to exclusive', async () => {
    const all = (await payments('--format', 'ndjson')).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const third = all[2].authorized_at as string;
    const from = await payments('--format', 'ndjson', '--from', third);
    const fromNonces = from.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).nonce);
    expect(fromNonces[0]).toBe(all.find((r) => r.authorized_at === third).nonce);
    expect(fromNonces).not.toContain(nonce(1));
    const before = await payments('--format', 'csv', '--to', '2000-01-01');
    expect(before.stdout.trim()).toBe(LEDGER_COLUMNS.join(','));
  });

  it('refuses a bad flag value in one line with where the usage is, exit 2', async () => {
    for (const [args, message] of [
      [
        ['--status', 'paid'],
        '--status must be one of authorized, pending, settled, failed, released (got paid)',
      ],
      [['--format', 'xlsx'], '--format must be one of summary, csv, ndjson (got xlsx)'],
      [['--from', 'yesterday'], '--from must be an ISO 8601 date or time'],
      [['--to', '2026-13-45'], '--to must be an ISO 8601 date or time'],
      [['--colour'], 'payments does not take --colour'],
    ] as const) {
      const { code, stderr } = await payments(...args);
      expect(code, args.join(' ')).toBe(2);
      expect(stderr.split('\n')[0]).toContain(message);
      // Started as node, not by npm: the hint names that command.
      expect(stderr.split('\n').slice(1)).toEqual([
        'for the usage: node --import tsx services/operator/cli.ts --help',
        '',
      ]);
    }
  });

  it('refuses a DATA_DIR that holds no log rather than answer from an empty one', async () => {
    const { code, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', 'services/operator/cli.ts', 'payments'],
      { cwd: ROOT, env: { PATH: process.env.PATH, DATA_DIR: join(root, 'empty') } },
    ).then(
      () => ({ code: 0, stderr: '' }),
      (err: { code: number; stderr: string }) => err,
    );
    expect(code).toBe(2);
    expect(stderr).not.toBe('');
  });

  it('writes amounts with their six places', () => {
    expect([usdc(0n), usdc(1n), usdc(20_000n), usdc(123_456_789n)]).toEqual([
      '0.000000',
      '0.000001',
      '0.020000',
      '123.456789',
    ]);
  });
});
