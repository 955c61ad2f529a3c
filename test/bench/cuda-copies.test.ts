// bench/cuda-copies.c, the LD_PRELOAD library that times UCX's device copies on the GPU machine
// (docs/gpu.md "Allocation sizes"). Here, without a GPU: it builds with the flags
// scripts/build-bench-c.sh keeps, leaves a process that never copies on a device exactly as it was,
// and, in front of a stand-in libcuda (fixtures/fake-libcuda.c) driven the way UCX drives the real
// one (fixtures/cuda-copies-driver.c), reports what it saw. What the GPU does runs there only.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
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

  it('in front of a stand-in libcuda: times the large copy, counts the small one, the IPC open and the callback', () => {
    const { cudaInclude } = JSON.parse(readFileSync(join(root, 'build/gdrpc-build.json'), 'utf8')) as { cudaInclude: string };
    const lib = join(dir, 'cuda-copies.so');
    execFileSync('bash', [join(root, 'scripts/build-bench-c.sh'), 'cuda-copies', lib, cudaInclude], { stdio: 'pipe' });
    const fake = join(dir, 'fake', 'libcuda.so.1');
    mkdirSync(dirname(fake), { recursive: true });
    const cc = process.env.CC ?? 'cc';
    execFileSync(cc, ['-shared', '-fPIC', '-Wall', '-Wl,-soname,libcuda.so.1', '-o', fake, join(root, 'test/bench/fixtures/fake-libcuda.c')], { stdio: 'pipe' });
    const driver = join(dir, 'driver');
    execFileSync(cc, ['-Wall', '-o', driver, join(root, 'test/bench/fixtures/cuda-copies-driver.c'), fake], { stdio: 'pipe' });
    const out = join(dir, 'summaries');
    mkdirSync(out);
    const env = { ...process.env, LD_LIBRARY_PATH: dirname(fake), GDRPC_CUDA_COPIES_DIR: out, GDRPC_CUDA_COPIES_LABEL: 'driver' };
    const plain = spawnSync(driver, { encoding: 'utf8', env });
    expect(plain.status).toBe(0);
    expect(plain.stdout).toBe('ipc 42\n');
    expect(plain.stderr).toBe('');
    const run = spawnSync(driver, { encoding: 'utf8', env: { ...env, LD_PRELOAD: lib } });
    expect(run.status).toBe(0);
    // The 64-byte handle went through the wrapper by value, intact.
    expect(run.stdout).toBe('ipc 42\n');
    expect(run.stderr).toMatch(/^cuda-copies\[\d+\] driver: 2 copies \(4198400 bytes\), 1 of 1 MiB or more timed; device time p50 500\.0 max 500\.0 us;/);
    expect(run.stderr).toMatch(/IPC handle opens 1 \(\d+ us\); stream callbacks 1\n$/);
    const files = readdirSync(out);
    expect(files).toEqual([`cuda-copies.${run.pid}.txt`]);
    expect(readFileSync(join(out, files[0]!), 'utf8')).toBe(run.stderr);
  });

  it('refuses an unknown program name with exit 2', () => {
    const result = spawnSync('bash', [join(root, 'scripts/build-bench-c.sh'), 'nothing', join(dir, 'x'), dir], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/unknown program 'nothing'/);
  });
});
