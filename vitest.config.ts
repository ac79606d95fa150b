import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: ['node_modules/**', 'data/**', 'dist/**'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores on CI: forks keep native addons (lmdb) isolated per file.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
