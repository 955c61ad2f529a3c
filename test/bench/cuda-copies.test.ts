// bench/cuda-copies.c, the LD_PRELOAD library that times UCX's device copies on the GPU machine
// (docs/gpu.md "Allocation sizes"). Without a GPU it can only be built and loaded: it must build
// with the flags scripts/build-bench-c.sh keeps, and leave a process that never copies on a device
// exactly as it was (no output, same exit). What it measures runs on the GPU machine only.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gdrpc-cuda-copies-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('bench/cuda-copies.c', () => {
  it('builds, and loaded into a process that copies nothing it changes nothing', () => {
    const { cudaInclude } = JSON.parse(readFileSync(join(root, 'build/gdrpc-build.json'), 'utf8')) as { cudaInclude: string };
    const lib = join(dir, 'cuda-copies.so');
    execFileSync('bash', [join(root, 'scripts/build-bench-c.sh'), 'cuda-copies', lib, cudaInclude], { stdio: 'pipe' });
    const script = 'process.stdout.write("ran"); process.exitCode = 7';
    const plain = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    const loaded = spawnSync(process.execPath, ['-e', script], {
      encoding: 'utf8', env: { ...process.env, LD_PRELOAD: lib, GDRPC_CUDA_COPIES_DIR: dir },
    });
    expect(plain.status).toBe(7);
    expect(loaded.status).toBe(7);
    expect(loaded.stdout).toBe('ran');
    expect(loaded.stderr).toBe(plain.stderr);
    // No summary file either: it writes one only for copies it saw.
    expect(readdirSync(dir)).toEqual(['cuda-copies.so']);
  });

  it('refuses an unknown program name with exit 2', () => {
    const result = spawnSync('bash', [join(root, 'scripts/build-bench-c.sh'), 'nothing', join(dir, 'x'), dir], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/unknown program 'nothing'/);
  });
});
