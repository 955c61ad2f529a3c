import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const here = (path: string): string => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  // Inside this repository `gdrpc` means the sources, as in tsconfig.json's paths (the package's
  // exports point at dist/, which test/setup/build-dist.ts rebuilds for the CLI and consumer tests).
  resolve: {
    alias: [
      { find: /^gdrpc$/, replacement: here('./core/index.ts') },
      { find: /^gdrpc\/codegen$/, replacement: here('./codegen/index.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/build-dist.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Suites spawn peer processes and hold UCX workers: one file at a time keeps
    // the 2-core CI machine from timing out on scheduling noise.
    fileParallelism: false,
    pool: 'forks',
  },
});
