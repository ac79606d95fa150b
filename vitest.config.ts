import { defineConfig } from 'vitest/config';

const UNIT = '**/*.unit.test.ts';
const EXCLUDE = ['node_modules/**', 'data/**', 'dist/**'];

export default defineConfig({
  test: {
    // Tests wait on conditions; these limits only end a test that hangs. They are sized for a
    // shared two-core machine under load 10-30 (another `npm test` beside this one), where
    // a 30 s test or a 15 s poll of a quiet machine overran: a test passes or fails on what it
    // checks, not on how busy the machine is.
    testTimeout: 600_000,
    hookTimeout: 600_000,
    expect: { poll: { timeout: 120_000 } },
    // Two cores on CI: forks keep native addons (lmdb) isolated per file.
    pool: 'forks',
    // Services a test starts replay the shipped slice unless the test names its data: the full
    // set beside the checkout (npm start's default, covered by adapters/market/default-replay)
    // doubles each engine's work, and two suites side by side on two cores felt it.
    env: { MARKET_DATA_DIR: process.env.MARKET_DATA_DIR ?? 'sample-data/market' },
    maxWorkers: 2,
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
          include: ['**/*.test.ts'],
          exclude: [...EXCLUDE, UNIT],
        },
      },
    ],
  },
});
