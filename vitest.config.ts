import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification, type TestUserConfig } from 'vitest/node';

const UNIT = '**/*.unit.test.ts';
const EXCLUDE = ['node_modules/**', 'data/**', 'dist/**'];
/**
 * Suites of minutes that a change rarely touches: the fault drill (and its process supervisor),
 * the history export's flat heap at scale, `npm run build`, and the suites that drive the local chain (anvil)
 * themselves. `npm test` (and so CI) runs them; `npx vitest` and `--project unit --project io` do not.
 * Longest first (a quiet full run: 63, 31, 15, 7.5, 6, 5, under 1, 2.4 and under 1 s; the drill
 * 144 s in a run at load 5-7): the order in which they start (see LongestFirst).
 */
const SLOW = [
  'test/drill-hosts.e2e.test.ts',
  'services/history/history-scale.int.test.ts',
  'test/build.int.test.ts',
  'scripts/drill/*.test.ts',
  'test/x402-settlement.e2e.test.ts',
  'test/x402-payer-safety.e2e.test.ts',
  'test/chain/*.test.ts',
  'test/x402-payer-safety-mcp.e2e.test.ts',
  'services/payments/local-facilitator.int.test.ts',
];

/**
 * The order files start in: the slow project's first, in SLOW's order, then io's, then unit's.
 * Vitest's own order runs the projects by name (io, slow, unit) and, within one, the longest
 * first by the durations it cached from an earlier run, or the largest file first on a fresh
 * clone, which has none (CI). The slow suites, minutes each, then started only once every io
 * file had: in a full run under load 12 the million-event history (318 s) began at 711 s of
 * 1,113 and the build's tsc (141 s) only after the drill, on the same worker, so the last five
 * minutes ran those beside each other and the unit files last. Started first, they run beside
 * the io files, and the short files come last.
 * Within io and unit vitest's order stays (cached durations, else size); unit stays last and
 * together, since its files share one worker only while they follow each other in the queue.
 */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    // SLOW's globs have `*` within one folder only. (node:path's matchesGlob would do, but Node 24
    // prints an experimental warning for it.)
    const slow = SLOW.map(
      (glob) => new RegExp(`^${glob.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replaceAll('*', '[^/]*')}$`),
    );
    const rank = (spec: TestSpecification): number => {
      if (spec.project.name === 'unit') return SLOW.length + 1;
      if (spec.project.name !== 'slow') return SLOW.length;
      const file = relative(spec.project.config.root, spec.moduleId);
      const at = slow.findIndex((glob) => glob.test(file));
      return at === -1 ? SLOW.length : at;
    };
    // Array sort is stable: within a rank, vitest's order.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    // Tests wait on conditions; these limits only end a test that hangs, and a hang should not
    // cost ten minutes. They leave room for a shared two-core machine under load (a 30 s test of
    // a quiet machine overran 30 s there); the few tests that take minutes by design say so with
    // a limit of their own. A poll gives up before its test does, so its failure names the condition.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    expect: { poll: { timeout: 60_000 } },
    // Forks keep native addons (lmdb) in processes of their own: one per slow file, one per worker
    // for the io and unit files, which share their worker (isolate: false below).
    pool: 'forks',
    // Services a test starts replay the shipped slice unless the test names its data: the full
    // set beside the checkout (npm start's default, covered by adapters/market/default-replay)
    // doubles each engine's work, and two suites side by side on two cores felt it.
    env: { MARKET_DATA_DIR: process.env.MARKET_DATA_DIR ?? 'sample-data/market' },
    // Three on two cores: a file's servers start, children boot and tests wait on conditions, so
    // two workers left about a quarter of the cores idle (a fresh clone's CI, vitest 330 s with
    // three against 362 s with two, measured before io's files shared their worker).
    maxWorkers: 3,
    sequence: { sequencer: LongestFirst },
    // What `npx vitest` (watch) and a plain `npx vitest run` run; a `--project` on the command line
    // replaces it, as `npm test` does to add the slow one. (A command-line option, typed in
    // TestUserConfig rather than in the config file's InlineConfig; vitest takes it from either.)
    ...({ project: ['unit', 'io'] } satisfies TestUserConfig),
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: [UNIT],
          exclude: EXCLUDE,
          // Pure logic, no servers, ports or files of their own: a worker keeps the modules it
          // loaded for the next unit file instead of importing them again (the 72 unit files took
          // 31 s isolated, 17 s not, most of it importing the same zod contracts and libraries).
          isolate: false,
        },
      },
      {
        extends: true,
        test: {
          name: 'io',
          // A worker keeps the modules it loaded for its next io file, as unit's do: the files start
          // servers and children of their own, each in its own folder, port and schema, and close
          // them; module state that outlives a file is reset where a file starts (viem's process-wide
          // nonce manager in test/chain/local-chain.ts). Isolated, each file imported its own copy of
          // the service's modules, 1-3 CPU s apiece: 24 short io files took 41-42 CPU s isolated and
          // 19-20 not (load 8-10); a full run 392 CPU s and 396 s at load 7-9.
          isolate: false,
          include: ['**/*.test.ts'],
          exclude: [...EXCLUDE, UNIT, ...SLOW],
        },
      },
      {
        extends: true,
        test: {
          name: 'slow',
          include: SLOW,
          exclude: EXCLUDE,
        },
      },
    ],
  },
});
