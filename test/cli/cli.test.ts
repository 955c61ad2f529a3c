// The gdrpc command as a user runs it: info and doctor reports, doctor's exit status on this
// machine, and commands at the top level. Help and usage errors are in help.test.ts.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { bin, gdrpc as run } from './gdrpc-process.ts';

const gdrpc = (...args: string[]) => run(args);

/** Whether this machine has a CUDA driver and a visible GPU (decides doctor's exit status). */
function hasGpu(): boolean {
  const info = JSON.parse(spawnSync(process.execPath, [bin, 'info', '--json'], { encoding: 'utf8' }).stdout);
  return info.cuda.available && info.cuda.devices.length > 0;
}
const gpu = hasGpu();

/** Whether ts-morph, which `gdrpc gen` writes TypeScript with, is installed: a development
 *  dependency, left out of what scripts/gpu-pack.sh carries to the GPU machine. */
function hasTsMorph(): boolean {
  try {
    createRequire(import.meta.url).resolve('ts-morph');
    return true;
  } catch {
    return false;
  }
}
const tsMorph = hasTsMorph();
if (!tsMorph) console.log('test/cli/cli.test.ts: gen --check skipped: ts-morph is not installed here (a development dependency)');

describe('gdrpc info', () => {
  it('--json reports UCX version, transports and CUDA state', async () => {
    const r = await gdrpc('info', '--json');
    expect(r.code).toBe(0);
    const info = JSON.parse(r.stdout);
    expect(info.ucx.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(Array.isArray(info.ucx.transports)).toBe(true);
    expect(info.ucx.transports).toContain('tcp');
    expect(info.ucx.libraryPath).toMatch(/libucp\.so/);
    expect(typeof info.cuda.available).toBe('boolean');
    expect(Array.isArray(info.cuda.devices)).toBe(true);
    if (!info.cuda.available) {
      expect(info.cuda.devices).toEqual([]);
      expect(info.cuda.reason).toMatch(/\S/);
      expect(info.cuda.canMapMemory).toBe(false);
    } else {
      expect(info.cuda.devices.length).toBeGreaterThan(0);
    }
  });

  it('prints the same facts as text', async () => {
    const r = await gdrpc('info');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^UCX \d+\.\d+\.\d+/m);
    expect(r.stdout).toMatch(/transports: .*tcp/);
    expect(r.stdout).toMatch(/CUDA memory mappable by UCX: (yes|no \(.+\))/);
  });

  it('rejects an unknown option with usage', async () => {
    const r = await gdrpc('info', '--bogus');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown option --bogus/);
  });
});

describe('gdrpc doctor', () => {
  it('--json lists checks with a status, the transfer paths and the outcome that is the exit status', async () => {
    const r = await gdrpc('doctor', '--json');
    const report = JSON.parse(r.stdout);
    const names = report.checks.map((c: { name: string }) => c.name);
    expect(names).toEqual(expect.arrayContaining(['GPUs and driver', 'peer access', 'topology', 'RDMA devices',
      'GPUDirect RDMA support', 'UCX RDMA transports', 'UCX CUDA memory', 'UCX TCP ports']));
    for (const c of report.checks) expect(['ok', 'warn', 'fail', 'info']).toContain(c.status);
    expect(r.code).toBe(report.outcome.exitCode);
    expect(report.paths.withinMachine).toMatch(/cuda_ipc|staged/);
    expect(report.paths.betweenMachines).toMatch(/rdma|tcp/);
    const failed = report.checks.some((c: { status: string }) => c.status === 'fail');
    expect(report.outcome.status).toBe(failed ? 'fail' : gpu ? 'ok' : 'no-gpu-path');
  });

  it('lists UCX\'s own TCP ports: a warning where one faces the network unguarded, guarded ones under GDRPC_ALLOWED_PEERS', async () => {
    const ports = (report: { checks: Array<{ name: string; status: string; detail: string }> }) => report.checks.find((c) => c.name === 'UCX TCP ports')!;
    const open = ports(JSON.parse((await gdrpc('doctor', '--json')).stdout));
    expect(open.detail).toMatch(/127\.0\.0\.1:\d+/);
    expect(open.status).toBe(/(^|, )(?!127\.)[\d.]+:\d+(?! \(guarded\))/.test(open.detail) ? 'warn' : 'ok');
    const guarded = ports(JSON.parse((await run(['doctor', '--json'], { env: { GDRPC_ALLOWED_PEERS: '127.0.0.1' } })).stdout));
    expect(guarded.status).toBe('ok');
    expect(guarded.detail).toMatch(/127\.0\.0\.1:\d+ \(guarded\)/);
    expect(guarded.detail).not.toMatch(/:\d+(?! \(guarded\))(,|:)/);
  });

  it.runIf(!gpu)('without a GPU exits 3 (no GPU path), fails no check, and says host tensors work', async () => {
    const r = await gdrpc('doctor');
    expect(r.code).toBe(3);
    expect(r.stdout).not.toMatch(/^\[FAIL\]/m);
    expect(r.stdout).toMatch(/^\[WARN\] GPUs and driver: no (CUDA driver|visible GPU)/m);
    expect(r.stdout).toMatch(/^result: no GPU path \(no (CUDA driver|visible GPU)\): host tensors work; .*\(exit 3\)$/m);
    const json = JSON.parse((await gdrpc('doctor', '--json')).stdout);
    expect(json.outcome).toMatchObject({ status: 'no-gpu-path', exitCode: 3 });
    expect(json.checks.find((c: { name: string }) => c.name === 'GPUs and driver').fix).toMatch(/host tensors work/);
  });

  it.runIf(gpu)('with a GPU exits 0, or 1 when a check failed, and says which', async () => {
    const r = await gdrpc('doctor');
    const failed = r.stdout.match(/^\[FAIL\] [^:]+/gm) ?? [];
    expect(r.code).toBe(failed.length > 0 ? 1 : 0);
    expect(r.stdout).toMatch(failed.length > 0 ? /^result: failed: .*\(exit 1\)$/m : /^result: every check that applies passed \(exit 0\)$/m);
  });
});

describe('gdrpc command', () => {
  it('an unknown command exits 2 with usage on stderr', async () => {
    const r = await gdrpc('frobnicate');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown command 'frobnicate'/);
    expect(r.stderr).toMatch(/usage: gdrpc/);
  });

  it('help exits 0 and lists the commands and exit statuses', async () => {
    const r = await gdrpc('help');
    expect(r.code).toBe(0);
    for (const c of ['info', 'doctor', 'gen']) expect(r.stdout).toMatch(new RegExp(`^  ${c} `, 'm'));
    expect(r.stdout).toMatch(/exit status: 0 success; 1 failure; 2 usage error; 3 doctor found no GPU path/);
  });

  it.skipIf(!tsMorph)('gen --check on the committed schemas finds them fresh', async () => {
    const r = await gdrpc('gen', 'schemas', '--out', 'schemas/gen', '--check');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });
});
