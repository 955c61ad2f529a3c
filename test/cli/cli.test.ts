// The gdrpc command as a user runs it: a separate process through bin/gdrpc.js.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const bin = fileURLToPath(new URL('../../bin/gdrpc.js', import.meta.url));
const run = promisify(execFile);

async function gdrpc(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

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
  it('--json lists checks with a status and the transfer paths', async () => {
    const r = await gdrpc('doctor', '--json');
    const report = JSON.parse(r.stdout);
    const names = report.checks.map((c: { name: string }) => c.name);
    expect(names).toEqual(expect.arrayContaining(['GPUs and driver', 'peer access', 'topology', 'RDMA devices',
      'GPUDirect RDMA support', 'UCX RDMA transports', 'UCX CUDA memory']));
    for (const c of report.checks) expect(['ok', 'warn', 'fail', 'info']).toContain(c.status);
    expect(r.code).toBe(report.checks.some((c: { status: string }) => c.status === 'fail') ? 1 : 0);
    expect(report.paths.withinMachine).toMatch(/cuda_ipc|staged/);
    expect(report.paths.betweenMachines).toMatch(/rdma|tcp/);
    if (!report.info.cuda.available) {
      const gpu = report.checks.find((c: { name: string }) => c.name === 'GPUs and driver');
      expect(gpu.status).toBe('fail');
      expect(gpu.fix).toMatch(/driver/);
    }
  });
});

describe('gdrpc command', () => {
  it('an unknown command exits 2 with usage', async () => {
    const r = await gdrpc('frobnicate');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown command 'frobnicate'/);
    expect(r.stderr).toMatch(/usage: gdrpc/);
  });

  it('help exits 0 and lists the commands', async () => {
    const r = await gdrpc('help');
    expect(r.code).toBe(0);
    for (const c of ['info', 'doctor', 'gen']) expect(r.stdout).toContain(c);
  });

  it('gen --check on the committed schemas finds them fresh', async () => {
    const r = await gdrpc('gen', 'schemas', '--out', 'schemas/gen', '--check');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });
});
