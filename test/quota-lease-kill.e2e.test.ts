import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { hashApiKey } from '../services/keys/key-material.ts';
import { debitedUnits } from '../services/metering/quota-projection.ts';
import { runServiceProcess } from './service-process.ts';

const CALLERS = 16;
const LEASE_MAX_UNITS = 128;

const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/**
 * The embedded service in its own process, killed with SIGKILL while a busy key's calls are
 * served from leases: every call answered 200 must have its unit on the log, and the log may hold
 * no more beyond them than the calls in flight and the one lease the process held.
 */
describe('kill -9 of the service under a busy key', () => {
  it('loses no answered debit; charges at most the calls in flight and one lease beyond them', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'lease-kill-'));
    dirs.push(dataDir);
    const seed = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const { key } = await issueKey(seed, { plan: 'pro', owner: 'lease-kill', via: 'operator' });
    await seed.close();

    const run = runServiceProcess({
      DATA_DIR: dataDir,
      RATE_LIMIT_ENABLED: 'false',
      QUOTA_LEASE_MAX_UNITS: String(LEASE_MAX_UNITS),
    });
    children.push(run.child);
    const started = () => run.lines.find((l) => l.msg === 'service started');
    await expect
      .poll(() => started() !== undefined || run.stderr.length > 0, { timeout: 60_000, interval: 100 })
      .toBe(true);
    const url = started()?.url as string | undefined;
    if (url === undefined) throw new Error(`the service did not start: ${run.stderr}`);

    let answered = 0;
    let running = true;
    const wrong: number[] = [];
    const loops = Array.from({ length: CALLERS }, async () => {
      while (running) {
        let res: Response;
        try {
          res = await fetch(`${url}/x402/get_trade_call`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
            body: JSON.stringify({ coin: 'BTC' }),
          });
        } catch {
          // The process is gone: this caller's last call got no answer.
          return;
        }
        if (res.status !== 200) {
          wrong.push(res.status);
          return;
        }
        // Answered: the status line came, whether or not the body still does.
        answered++;
        await res.arrayBuffer().catch(() => undefined);
      }
    });
    // Long enough for the key to be leased and its lease renewed a few times. A count, not a rate:
    // the wait is a bound against a hang (a loaded two-core host serves far fewer calls a second).
    await expect.poll(() => answered, { timeout: 150_000, interval: 50 }).toBeGreaterThan(1_500);
    run.child.kill('SIGKILL');
    await run.exit;
    running = false;
    await Promise.all(loops);

    expect(wrong).toEqual([]);
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    try {
      const subject = hashApiKey(key);
      const log = await store.readAll();
      const debited = log.reduce((sum, e) => sum + debitedUnits(e, subject), 0);
      expect(debited).toBeGreaterThanOrEqual(answered);
      expect(debited - answered).toBeLessThanOrEqual(CALLERS + LEASE_MAX_UNITS);
      // Leases were taken: a batch of calls holds at most one per caller, a lease more.
      const units = log
        .filter((e) => e.type === 'QuotaDebitsRecorded' && debitedUnits(e, subject) > 0)
        .map((e) => debitedUnits(e, subject));
      expect(Math.max(...units)).toBeGreaterThan(CALLERS);
      console.info(
        `lease kill test: ${answered} calls answered, ${debited} units debited, largest debit event ${Math.max(...units)} units`,
      );
    } finally {
      await store.close();
    }
  }, 300_000);
});
