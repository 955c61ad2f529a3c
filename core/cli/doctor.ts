// `gdrpc doctor`: the GPUDirect checklist as a command. Each check says what it saw and, when
// something is wrong, what to do about it; the transfer paths follow from the checks, and so does
// the outcome, which is the exit status (docs/cli.md).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cuda } from '../cuda.ts';
import { Runtime } from '../rpc/runtime/runtime.ts';
import { collectInfo, type InfoReport } from './info.ts';
import { ExitCode, parseCommandLine } from './command-line.ts';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'info';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about a warn or fail. */
  fix?: string;
}

/** What the checks add up to; it gives the exit status. */
export interface DoctorOutcome {
  /** 'no-gpu-path': nothing failed, but there is no CUDA driver or no visible GPU. */
  status: 'ok' | 'no-gpu-path' | 'fail';
  exitCode: number;
  summary: string;
}

export interface DoctorReport {
  checks: Check[];
  paths: { withinMachine: string; betweenMachines: string };
  outcome: DoctorOutcome;
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
    // Not a failure: a machine without a GPU runs gdrpc with host tensors (the outcome says so).
    return [{ name: 'GPUs and driver', status: 'warn', detail: `no CUDA driver: ${info.cuda.reason ?? 'unknown'}`,
      fix: 'for CUDA tensors install the NVIDIA driver (libcuda.so.1 must be loadable); host tensors work without it' },
    { name: 'peer access', status: 'info', detail: 'no CUDA driver: no GPU pairs to check' }];
  }
  const n = info.cuda.devices.length;
  const checks: Check[] = [{
    name: 'GPUs and driver',
    status: n > 0 ? 'ok' : 'warn',
    detail: `driver API ${info.cuda.driverVersion}, ${n} device(s): ` +
      info.cuda.devices.map((d) => `cuda:${d.index} ${d.name}`).join(', '),
    ...(n > 0 ? {} : { fix: 'no visible GPU: check CUDA_VISIBLE_DEVICES and nvidia-smi; host tensors work without one' }),
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

/** What the GPUDirect RDMA checks and the path between machines are decided on, read once. */
interface RdmaFacts {
  devices: string[];
  peermem: boolean;
  dmabuf: boolean;
  /** UCX transports over verbs (rc, dc, ud). */
  verbs: string[];
}

function rdmaFacts(info: InfoReport): RdmaFacts {
  return {
    devices: rdmaDevices(),
    peermem: loadedModules().has('nvidia_peermem') || existsSync('/sys/module/nvidia_peermem'),
    dmabuf: existsSync('/sys/kernel/dmabuf') || existsSync('/sys/kernel/debug/dma_buf'),
    verbs: info.ucx.transports.filter((t) => /^(rc|dc|ud)/.test(t)),
  };
}

/** A check; `fix` is left out when there is nothing to do. */
function check(name: string, status: CheckStatus, detail: string, fix?: string): Check {
  return fix === undefined ? { name, status, detail } : { name, status, detail, fix };
}

function gdrChecks(info: InfoReport, f: RdmaFacts): Check[] {
  const hasDevices = f.devices.length > 0;
  return [
    hasDevices
      ? check('RDMA devices', 'ok', f.devices.join(', '))
      : check('RDMA devices', 'info', 'none in /sys/class/infiniband: between machines only TCP is possible'),
    f.peermem || f.dmabuf
      ? check('GPUDirect RDMA support', 'ok',
        [f.peermem && 'nvidia_peermem loaded', f.dmabuf && 'kernel dma-buf present'].filter(Boolean).join(', '))
      : check('GPUDirect RDMA support', hasDevices ? 'warn' : 'info', 'neither nvidia_peermem nor dma-buf found',
        'load nvidia_peermem (modprobe nvidia_peermem) or use a kernel >= 5.12 with driver >= 515 for dma-buf'),
    f.verbs.length > 0
      ? check('UCX RDMA transports', 'ok', f.verbs.join(', '))
      : check('UCX RDMA transports', hasDevices ? 'warn' : 'info', `this UCX (${info.ucx.source}) has no verbs transports`,
        hasDevices ? 'rebuild with GDRPC_UCX_HOME pointing at a UCX with verbs (MOFED/HPC-X) to use RDMA' : undefined),
  ];
}

function ucxCudaCheck(info: InfoReport): Check {
  if (info.cuda.canMapMemory) {
    return check('UCX CUDA memory', 'ok', `ucp_mem_map of cuda:0 memory reports CUDA; transports: ${info.ucx.transports.join(', ')}`);
  }
  // Without a GPU there is nothing to map: that is the no-GPU-path outcome, not this check failing.
  const gpu = info.cuda.available && info.cuda.devices.length > 0;
  return check('UCX CUDA memory', gpu ? 'fail' : 'info', `cannot map CUDA memory: ${info.cuda.mapReason ?? 'unknown'}`,
    gpu ? 'use a UCX built with CUDA (the bundled libucx-cu13 wheel, or GDRPC_UCX_HOME); until then tensors are staged through host memory' : undefined);
}

function transferPaths(info: InfoReport, f: RdmaFacts): DoctorReport['paths'] {
  const withinMachine = !info.cuda.canMapMemory ? 'staged (through host memory)'
    : info.ucx.transports.includes('cuda_ipc') ? 'cuda_ipc (GPU to GPU, no host copy)' : 'staged (UCX has no cuda_ipc transport)';
  const rdma = f.verbs.some((t) => /^(rc|dc)/.test(t));
  const betweenMachines = rdma && (f.peermem || f.dmabuf) && info.cuda.canMapMemory ? 'rdma (GPUDirect RDMA)'
    : rdma ? 'rdma with host staging for CUDA memory' : 'tcp (CUDA memory staged through host)';
  return { withinMachine, betweenMachines };
}

/** A failed check wins; then a machine without a GPU, which still runs gdrpc with host tensors. */
function outcome(checks: Check[], info: InfoReport): DoctorOutcome {
  const failed = checks.filter((c) => c.status === 'fail').map((c) => c.name);
  if (failed.length > 0) {
    return { status: 'fail', exitCode: ExitCode.FAILURE, summary: `failed: ${failed.join(', ')}` };
  }
  if (!info.cuda.available || info.cuda.devices.length === 0) {
    const why = info.cuda.available ? 'no visible GPU' : 'no CUDA driver';
    return { status: 'no-gpu-path', exitCode: ExitCode.NO_GPU_PATH,
      summary: `no GPU path (${why}): host tensors work; CUDA tensors need a GPU and the NVIDIA driver` };
  }
  return { status: 'ok', exitCode: ExitCode.OK, summary: 'every check that applies passed' };
}

const LOOPBACK = /^(127\.|::1$|::ffff:127\.)/;

/** UCX's own TCP ports as a runtime of this environment opens them (GDRPC_ALLOWED_PEERS,
 *  UCX_NET_DEVICES): what a peer on the network reaches before any token is checked. */
function tcpPortsCheck(): Check {
  let runtime: Runtime | undefined;
  try {
    runtime = Runtime.create();
    const ports = runtime.ports();
    const open = ports.filter((p) => !p.guarded && !LOOPBACK.test(p.address));
    const list = ports.map((p) => `${p.address.includes(':') ? `[${p.address}]` : p.address}:${p.port}${p.guarded ? ' (guarded)' : ''}`).join(', ');
    if (open.length === 0) {
      return check('UCX TCP ports', 'ok', ports.length === 0 ? 'UCX opens no TCP port here' : `${list}: ${ports.some((p) => p.guarded) ? 'only GDRPC_ALLOWED_PEERS may connect' : 'loopback only'}`);
    }
    return check('UCX TCP ports', 'warn', `${list}: anyone who reaches ${open.length === 1 ? 'this port' : 'these ports'} can crash or write into a gdrpc process before any token is checked (UCX's framing is not authenticated)`,
      'set GDRPC_ALLOWED_PEERS (RuntimeOptions.allowedPeers) to the hosts of your deployment, or RuntimeOptions.networkDevices ["lo"] where every peer runs on this host (docs/security.md "UCX\'s own ports")');
  } catch (error) {
    return check('UCX TCP ports', 'fail', `could not open a runtime: ${(error as Error).message}`);
  } finally {
    void runtime?.close();
  }
}

/** Runs every check; no check throws. */
export function collectDoctor(): DoctorReport {
  const info = collectInfo();
  const facts = rdmaFacts(info);
  const checks = [...gpuChecks(info), topologyCheck(), ...gdrChecks(info, facts), ucxCudaCheck(info), tcpPortsCheck()];
  return { checks, paths: transferPaths(info, facts), outcome: outcome(checks, info), info };
}

const marks: Record<CheckStatus, string> = { ok: ' ok ', warn: 'WARN', fail: 'FAIL', info: 'info' };

const command = {
  name: 'doctor',
  usage: `usage: gdrpc doctor [--json]

The GPUDirect checklist: GPUs and driver, peer access, topology, RDMA devices, GPUDirect RDMA
support, UCX RDMA transports and UCX CUDA memory; and which TCP ports UCX opens to the network. Each check says what it saw and, when something
is wrong, what to do; the transfer paths within and between machines follow from the checks.

options:
  --json       print the checks, paths, outcome and the info report as JSON
  -h, --help   this text

exit status:
  0  every check that applies passed (warnings are advice and leave it at 0)
  1  a check failed (or the checks could not run)
  2  usage error
  3  no GPU path: no CUDA driver or no visible GPU; host tensors work, CUDA tensors do not`,
  options: { json: { type: 'boolean' } },
} as const;

/** `gdrpc doctor [--json]`; the exit status is the outcome's (0, 1 or 3). */
export async function runDoctor(argv: string[]): Promise<number> {
  const args = parseCommandLine(command, argv);
  if (typeof args === 'number') return args;
  const report = collectDoctor();
  if (args.values.json) {
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
    console.log(`result: ${report.outcome.summary} (exit ${report.outcome.exitCode})`);
  }
  return report.outcome.exitCode;
}
