/**
 * Quota debit (issue 5): the atomic check-and-debit of the month and day windows (the Lua script
 * behind RedisCache.debitWindows) against a bare Redis INCR, on the real Redis at REDIS_URL,
 * from ioredis clients built with the same options and driven by the same closed loop at the
 * same concurrency. Target ≥ 0.5. The full QuotaMeter.debit (script + QuotaDebitsRecorded appended to
 * the in-memory event store) is printed for scale.
 *
 * Every key lives under a unique prefix, deleted at the end.
 *
 *   npx tsx bench/quota.bench.ts [--seconds=1.5] [--concurrency=32]
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { connectRedisCache } from '../adapters/cache/redis.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { PlanTable } from '../services/metering/plans.ts';
import { QuotaMeter } from '../services/metering/quota-meter.ts';
import { quotaPeriod, quotaWindows } from '../services/metering/windows.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { atLeast, recordTarget, whenMain } from './harness.ts';
import { bestOfRounds, closedLoop, fmtRate, type LoopResult, verdict } from './load-loop.ts';

const DEBIT_SCRIPT = readFileSync(new URL('../adapters/cache/debit-windows.lua', import.meta.url), 'utf8');

const TARGET = 0.5;
/** Large enough that no window ever refuses during the run: every call takes the debit path. */
const UNLIMITED: PlanTable = {
  free: { monthly: 1e12, daily: 1e12 },
  starter: { monthly: 1e12, daily: null },
  pro: { monthly: 1e12, daily: null },
};

export interface QuotaBenchOptions {
  url?: string;
  concurrency?: number;
  seconds?: number;
  rounds?: number;
  subjects?: number;
  print?: boolean;
}

export interface QuotaBenchResult {
  debit: LoopResult;
  incr: LoopResult;
  /** The same script sent from the bare client: what the script costs without the adapter. */
  script: LoopResult;
  meter: LoopResult;
  ratio: number;
  target: number;
}

export async function run(options: QuotaBenchOptions = {}): Promise<QuotaBenchResult> {
  const url = options.url ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const concurrency = options.concurrency ?? 32;
  const ms = (options.seconds ?? 1.5) * 1000;
  const rounds = options.rounds ?? 4;
  const subjects = options.subjects ?? 1000;
  const prefix = `bench:quota:${randomUUID()}:`;

  const cache = await connectRedisCache({ url, prefix, commandTimeoutMs: 10_000 });
  // The options RedisCache gives its own client, so both sides pay the same client costs.
  const bare: Redis & { benchDebit(n: number, ...args: (string | number)[]): Promise<unknown> } = new Redis(
    url,
    {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      connectTimeout: 2_000,
      commandTimeout: 10_000,
      connectionName: 'signal-service',
    },
  ) as never;
  bare.defineCommand('benchDebit', { lua: DEBIT_SCRIPT });
  try {
    await bare.connect();
    const health = await cache.health();
    if (!health.ok) throw new Error(`Redis at ${url} is not reachable: ${health.detail}`);

    // Spread over many subjects, as real traffic is; one hot key would measure nothing else.
    const period = quotaPeriod(Date.now());
    const windows = Array.from({ length: subjects }, (_, i) => quotaWindows(`s${i}`, UNLIMITED.pro, period));
    const incrKeys = windows.map((w) => prefix + w[0]!.key.replace('quota:', 'incr:'));
    let d = 0;
    let k = 0;
    const debitLoop = (duration: number) =>
      closedLoop(concurrency, duration, async () => {
        const result = await cache.debitWindows(windows[d++ % subjects]!, 1);
        if (!result.ok) throw new Error('debit refused with unlimited windows');
      });
    const incrLoop = (duration: number) =>
      closedLoop(concurrency, duration, () => bare.incr(incrKeys[k++ % subjects]!));
    const scriptArgs = windows.map((w) => [
      ...w.map((x) => `${prefix}raw:${x.key}`),
      1,
      ...w.flatMap((x) => [x.limit, x.expiresAt]),
    ]);
    let r = 0;
    const scriptLoop = (duration: number) =>
      closedLoop(concurrency, duration, () => bare.benchDebit(2, ...scriptArgs[r++ % subjects]!));

    await debitLoop(500);
    await incrLoop(500);
    await scriptLoop(500);
    const [debit, incr, script] = (await bestOfRounds(rounds, [
      () => debitLoop(ms),
      () => incrLoop(ms),
      () => scriptLoop(ms),
    ])) as [LoopResult, LoopResult, LoopResult];

    const meter = new QuotaMeter({ cache, store: new MemoryEventStore(), plans: UNLIMITED });
    let m = 0;
    const meterRun = await closedLoop(concurrency, ms, async () => {
      const i = m++;
      const outcome = await meter.debit(
        { id: `m${i % subjects}`, kind: 'key', plan: 'pro' },
        'get_trade_call',
      );
      if (!outcome.ok) throw new Error('meter refused with unlimited windows');
    });

    const ratio = debit.perSec / incr.perSec;
    if (options.print ?? true) {
      console.log(
        `quota bench: Redis at ${url}, ${concurrency} commands in flight, ${subjects} subjects, ${rounds} × ${ms} ms rounds`,
      );
      console.log(`  bare INCR:                                  ${fmtRate(incr.perSec)}`);
      console.log(`  same Lua script from the bare client:       ${fmtRate(script.perSec)}`);
      console.log(`  debitWindows (Lua, month + day windows):    ${fmtRate(debit.perSec)}`);
      console.log(`  QuotaMeter.debit (+ QuotaDebitsRecorded, memory):  ${fmtRate(meterRun.perSec)}`);
      console.log(`  ratio debitWindows / INCR: ${ratio.toFixed(2)}  ${verdict(ratio, TARGET, 'min')}`);
      console.log(
        recordTarget({
          bench: 'quota',
          measure: 'Lua debit of month + day windows / bare INCR',
          figure: ratio,
          target: atLeast(TARGET),
        }),
      );
    }
    return { debit, incr, script, meter: meterRun, ratio, target: TARGET };
  } finally {
    await wipePrefix(prefix, url).catch(() => undefined);
    bare.disconnect();
    await cache.close();
  }
}

await whenMain(import.meta.url, { seconds: 'number', concurrency: 'number' }, run);
