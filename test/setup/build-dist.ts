// Vitest global set-up: compiles dist/ from the current sources once per run, so the tests that
// run the `gdrpc` command (bin/gdrpc.js loads dist/) or pack the package never see a stale build.
// Where the compiler is not installed (the GPU machine runs a packed copy), scripts/gpu-run.sh
// carries a dist/ built from the same tree and sets GDRPC_DIST_PREBUILT=1.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  if (process.env.GDRPC_DIST_PREBUILT === '1') {
    const entry = fileURLToPath(new URL('../../dist/core/index.js', import.meta.url));
    if (!existsSync(entry)) throw new Error(`GDRPC_DIST_PREBUILT=1 but ${entry} is missing`);
    console.log('dist/ not rebuilt: GDRPC_DIST_PREBUILT=1 (a packed copy of this tree)');
    return;
  }
  const script = fileURLToPath(new URL('../../scripts/build-dist.mjs', import.meta.url));
  execFileSync(process.execPath, [script], { stdio: ['ignore', 'ignore', 'inherit'] });
}
