// Vitest global set-up: compiles dist/ from the current sources once per run, so the tests that
// run the `gdrpc` command (bin/gdrpc.js loads dist/) or pack the package never see a stale build.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  const script = fileURLToPath(new URL('../../scripts/build-dist.mjs', import.meta.url));
  execFileSync(process.execPath, [script], { stdio: ['ignore', 'ignore', 'inherit'] });
}
