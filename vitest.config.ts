import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Suites spawn peer processes and hold UCX workers: one file at a time keeps
    // the 2-core CI machine from timing out on scheduling noise.
    fileParallelism: false,
    pool: 'forks',
  },
});
