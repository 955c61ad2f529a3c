// `gdrpc doctor`: the GPUDirect checklist as a command. Each check says what it saw and, when
// something is wrong, what to do about it; the transfer paths follow from the checks.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cuda } from '../cuda.ts';
import { collectInfo, type InfoReport } from './info.ts';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'info';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about a warn or fail. */
  fix?: string;
}

export interface DoctorReport {
  checks: Check[];
  paths: { withinMachine: string; betweenMachines: string };
  info: InfoReport;
}

function tryRun(cmd: string, args: string[]): string | undefined {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
  } catch {
    return undefined;
  }
}

function gpuChecks(info: InfoReport): Check[] {
  if (!info.cuda.available) {
    return [{ name: 'GPUs and driver', status: 'fail', detail: `no CUDA driver: ${info.cuda.reason ?? 'unknown'}`,
      fix: 'install the NVIDIA driver (libcuda.so.1 must be loadable); host tensors still work' },
    { name: 'peer access', status: 'info', detail: 'no CUDA driver: no GPU pairs to check' }];
  }
  const n = info.cuda.devices.length;
  const checks: Check[] = [{
    name: 'GPUs and driver',
    status: n > 0 ? 'ok' : 'fail',
    detail: `driver API ${info.cuda.driverVersion}, ${n} device(s): ` +
      info.cuda.devices.map((d) => `cuda:${d.index} ${d.name}`).join(', '),
    ...(n > 0 ? {} : { fix: 'no visible GPU: check CUDA_VISIBLE_DEVICES and nvidia-smi' }),
  }];
  if (n > 1) {
    const missing: string[] = [];
    for (let a = 0; a < n; a++) {
      for (let b = 0; b < n; b++) if (a !== b && !cuda.canAccessPeer(a, b)) missing.push(`${a}->${b}`);
    }
    checks.push(missing.length === 0
      ? { name: 'peer access', status: 'ok', detail: `every pair of the ${n} GPUs can access each other` }
      : { name: 'peer access', status: 'warn', detail: `no peer access for ${missing.join(', ')}`,
        fix: 'these pairs copy through host memory; check nvidia-smi topo -m, ACS settings and IOMMU' });
  } else {
    checks.push({ name: 'peer access', status: 'info', detail: 'one GPU: no pairs to check' });
  }
  return checks;
}

function topologyCheck(): Check {
  const topo = tryRun('nvidia-smi', ['topo', '-m']);
  if (topo === undefined) {
    return { name: 'topology', status: 'info', detail: 'nvidia-smi not found: PCIe/NVLink topology not read' };
  }
  const nvlink = /\bNV\d+\b/.test(topo);
  return { name: 'topology', status: 'info',
    detail: `${nvlink ? 'NVLink between GPUs' : 'no NVLink links listed'}\n${topo.trimEnd()}` };
}

function loadedModules(): Set<string> {
  try {
    return new Set(readFileSync('/proc/modules', 'utf8').split('\n').map((l) => l.split(' ')[0] ?? ''));
  } catch {
    return new Set();
  }
}

function rdmaDevices(): string[] {
  const dir = '/sys/class/infiniband';
  return existsSync(dir) ? readdirSync(dir) : [];
}

function gdrChecks(info: InfoReport, rdma: string[]): Check[] {
  const modules = loadedModules();
  const peermem = modules.has('nvidia_peermem') || existsSync('/sys/module/nvidia_peermem');
  const dmabuf = existsSync('/sys/kernel/dmabuf') || existsSync('/sys/kernel/debug/dma_buf');
  const ibTransports = info.ucx.transports.filter((t) => /^(rc|dc|ud)/.test(t));
  return [
    rdma.length > 0
      ? { name: 'RDMA devices', status: 'ok', detail: rdma.join(', ') }
      : { name: 'RDMA devices', status: 'info', detail: 'none in /sys/class/infiniband: between machines only TCP is possible' },
    peermem || dmabuf
      ? { name: 'GPUDirect RDMA support', status: 'ok',
        detail: [peermem && 'nvidia_peermem loaded', dmabuf && 'kernel dma-buf present'].filter(Boolean).join(', ') }
      : { name: 'GPUDirect RDMA support', status: rdma.length > 0 ? 'warn' : 'info',
        detail: 'neither nvidia_peermem nor dma-buf found',
        fix: 'load nvidia_peermem (modprobe nvidia_peermem) or use a kernel >= 5.12 with driver >= 515 for dma-buf' },
    ibTransports.length > 0
      ? { name: 'UCX RDMA transports', status: 'ok', detail: ibTransports.join(', ') }
      : { name: 'UCX RDMA transports', status: rdma.length > 0 ? 'warn' : 'info',
        detail: `this UCX (${info.ucx.source}) has no verbs transports`,
        fix: rdma.length > 0 ? 'rebuild with GDRPC_UCX_HOME pointing at a UCX with verbs (MOFED/HPC-X) to use RDMA' : undefined },
  ].map((c) => (c.fix === undefined ? { name: c.name, status: c.status, detail: c.detail } : c)) as Check[];
}

function ucxCudaCheck(info: InfoReport): Check {
  if (info.cuda.canMapMemory) {
    return { name: 'UCX CUDA memory', status: 'ok', detail: `ucp_mem_map of cuda:0 memory reports CUDA; transports: ${info.ucx.transports.join(', ')}` };
  }
  return { name: 'UCX CUDA memory', status: info.cuda.available ? 'fail' : 'info',
    detail: `cannot map CUDA memory: ${info.cuda.mapReason ?? 'unknown'}`,
    fix: info.cuda.available ? 'use a UCX built with CUDA (the bundled libucx-cu13 wheel, or GDRPC_UCX_HOME); until then tensors are staged through host memory' : undefined } as Check;
}

function transferPaths(info: InfoReport, gdr: boolean): DoctorReport['paths'] {
  const t = new Set(info.ucx.transports);
  const withinMachine = !info.cuda.canMapMemory ? 'staged (through host memory)'
    : t.has('cuda_ipc') ? 'cuda_ipc (GPU to GPU, no host copy)' : 'staged (UCX has no cuda_ipc transport)';
  const rdma = [...t].some((x) => /^(rc|dc)/.test(x));
  const betweenMachines = rdma && gdr && info.cuda.canMapMemory ? 'rdma (GPUDirect RDMA)'
    : rdma ? 'rdma with host staging for CUDA memory' : 'tcp (CUDA memory staged through host)';
  return { withinMachine, betweenMachines };
}

/** Runs every check; no check throws. */
export function collectDoctor(): DoctorReport {
  const info = collectInfo();
  const rdma = rdmaDevices();
  const gdr = gdrChecks(info, rdma);
  const checks = [...gpuChecks(info), topologyCheck(), ...gdr, ucxCudaCheck(info)];
  const gdrOk = gdr.some((c) => c.name === 'GPUDirect RDMA support' && c.status === 'ok');
  return { checks, paths: transferPaths(info, gdrOk), info };
}

const marks: Record<CheckStatus, string> = { ok: ' ok ', warn: 'WARN', fail: 'FAIL', info: 'info' };

/** `gdrpc doctor [--json]`; exits 1 when a check fails. */
export async function runDoctor(argv: string[]): Promise<number> {
  const unknown = argv.filter((a) => a !== '--json');
  if (unknown.length > 0) {
    console.error(`gdrpc doctor: unknown option ${unknown[0]} (usage: gdrpc doctor [--json])`);
    return 2;
  }
  const report = collectDoctor();
  if (argv.includes('--json')) {
    console.log(JSON.stringify(report, null, 2));
  } else {
    for (const c of report.checks) {
      const [first, ...rest] = c.detail.split('\n');
      console.log(`[${marks[c.status]}] ${c.name}: ${first}`);
      for (const line of rest) console.log(`       ${line}`);
      if (c.fix) console.log(`       -> ${c.fix}`);
    }
    console.log(`path within this machine: ${report.paths.withinMachine}`);
    console.log(`path between machines:    ${report.paths.betweenMachines}`);
  }
  return report.checks.some((c) => c.status === 'fail') ? 1 : 0;
}
