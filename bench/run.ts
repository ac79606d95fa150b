import { printTargets, recordFailure, requestedHogs, startCpuHogs, watchHost } from './harness.ts';

/**
 * `npm run bench`: every benchmark in turn. Each prints its own table of rates and the ratio
 * against a baseline measured in the same run (never an absolute timing assertion), and records
 * its targets; the closing table lists every target recorded with its figure and met / MISSED.
 *   npm run bench                 all of them
 *   npm run bench -- relay engine only those
 *   npm run bench -- --loaded     each one twice: quiet, then beside a CPU hog (BENCH_LOAD=1)
 *   BENCH_LOAD=N npm run bench    the same with N hogs (each spins one core)
 * Each bench ends with the host conditions it ran with (load average, busy share of the cores). A
 * bench that throws (a service that never got ready, say) is reported as FAILED with its error in
 * the closing table, the others still run, and the run exits 1.
 */
const BENCHES: Record<string, () => Promise<unknown>> = {
  'event-store': async () => (await import('./event-store.bench.ts')).run(),
  postgres: async () => (await import('./postgres.bench.ts')).run(),
  'scale-out': async () => (await import('./scale-out.bench.ts')).run(),
  relay: async () => (await import('./relay.bench.ts')).run(),
  'relay-replicas': async () => (await import('./relay-replicas.bench.ts')).run(),
  engine: async () => (await import('./engine.bench.ts')).run(),
  rebuild: async () => (await import('./rebuild.bench.ts')).run(),
  startup: async () => (await import('./startup.bench.ts')).run(),
  idle: async () => (await import('./idle.bench.ts')).run(),
  scheduler: async () => (await import('./scheduler.bench.ts')).run(),
  growth: async () => (await import('./growth.bench.ts')).run(),
  // The 402 quote path is measured by the x402 bench, through the same out-of-process harness.
  http: async () =>
    (await import('./http-service.bench.ts')).run({
      paths: ['mcp', 'mcp-oneshot', 'mcp-2026', 'bearer', 'mcp-redis', 'verify', 'healthz'],
    }),
  x402: async () => (await import('./x402.bench.ts')).run(),
  'x402-paid': async () => (await import('./x402-paid-latency.bench.ts')).run(),
  quota: async () => (await import('./quota.bench.ts')).run(),
  budget: async () => (await import('./budget.bench.ts')).run(),
  mcp: async () => (await import('./mcp.bench.ts')).run(),
  'mcp-sessions': async () => (await import('./mcp-sessions.bench.ts')).run(),
  'rate-limit': async () => (await import('./rate-limit.bench.ts')).run(),
  webhooks: async () => (await import('./webhooks.bench.ts')).run(),
  knowledge: async () => (await import('./knowledge.bench.ts')).run(),
  history: async () => (await import('./history.bench.ts')).run(),
};

const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const unknown = wanted.filter((name) => !(name in BENCHES));
if (unknown.length > 0) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')}; known: ${Object.keys(BENCHES).join(', ')}`);
  process.exit(2);
}
if (process.argv.includes('--loaded') && process.env.BENCH_LOAD === undefined) process.env.BENCH_LOAD = '1';
const hogs = requestedHogs();
let failed = 0;
for (const name of wanted.length > 0 ? wanted : Object.keys(BENCHES)) {
  // Loaded right after quiet, bench by bench, so the two figures of a target come from one stretch of time.
  for (const loaded of hogs > 0 ? [false, true] : [false]) {
    const stopHogs = startCpuHogs(loaded ? hogs : 0);
    const host = watchHost();
    console.log(`\n=== ${name}${loaded ? ` (beside ${hogs} CPU hog${hogs === 1 ? '' : 's'})` : ''} ===`);
    const started = performance.now();
    try {
      await BENCHES[name]!();
    } catch (err) {
      failed += 1;
      console.error(`=== ${name} FAILED ===`);
      console.error(err);
      recordFailure(name, err);
    } finally {
      await stopHogs();
    }
    console.log(`(${name}: ${((performance.now() - started) / 1000).toFixed(1)} s; ${host()})`);
  }
}
printTargets();
if (failed > 0) process.exitCode = 1;
