// `gdrpc info`: what this process's UCX and CUDA can do, as text or JSON.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Context, MemoryRegion } from '../ucx/index.ts';
import { cuda, type CudaDeviceInfo } from '../cuda.ts';
import { GdrpcError } from '../errors.ts';
import { parseCommandLine } from './command-line.ts';
import { packageRoot } from '../package-root.ts';

export interface InfoReport {
  gdrpc: { version: string; node: string };
  ucx: {
    version: string;
    libraryPath: string;
    /** Where the build found UCX: GDRPC_UCX_HOME or the bundled wheel. */
    source: string;
    transports: string[];
    devices: Array<{ transport: string; device: string }>;
    memoryTypes: string[];
  };
  cuda: {
    available: boolean;
    reason?: string;
    driverVersion?: number;
    devices: CudaDeviceInfo[];
    /** A cuda:0 allocation mapped with ucp_mem_map came back as CUDA memory. */
    canMapMemory: boolean;
    mapReason?: string;
  };
}

/** A JSON file under the package root, or {} when it is missing or unreadable. */
function readJson(relative: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(join(packageRoot(), relative), 'utf8'));
  } catch {
    return {};
  }
}

/** Maps one MiB of cuda:0 and reports whether UCX detected it as CUDA memory. */
function probeCudaMapping(context: Context): { ok: boolean; reason?: string } {
  if (!context.memoryTypes().includes('cuda')) {
    return { ok: false, reason: 'this UCX build has no CUDA memory support (no cuda memory domain)' };
  }
  const bytes = 1 << 20;
  const ptr = cuda.alloc(0, bytes);
  try {
    const region = MemoryRegion.map(context, { address: ptr, length: bytes, memoryType: 'cuda' });
    try {
      return region.memoryType === 'cuda'
        ? { ok: true }
        : { ok: false, reason: `UCX mapped the allocation as '${region.memoryType}', not 'cuda'` };
    } finally {
      region.close();
    }
  } catch (error) {
    return { ok: false, reason: GdrpcError.from(error).rawMessage };
  } finally {
    cuda.free(ptr);
  }
}

/** Collects the report that `gdrpc info` prints; `doctor` builds on it. */
export function collectInfo(): InfoReport {
  const pkg = readJson('package.json');
  const build = readJson(join('build', 'gdrpc-build.json'));
  const context = Context.create();
  try {
    const devices = context.transports();
    const report: InfoReport = {
      gdrpc: { version: String(pkg.version ?? 'unknown'), node: process.version },
      ucx: {
        version: context.version,
        libraryPath: context.libraryPath,
        source: String(build.ucxSource ?? 'unknown'),
        transports: [...new Set(devices.map((d) => d.transport))],
        devices,
        memoryTypes: context.memoryTypes(),
      },
      cuda: { available: cuda.available(), devices: [], canMapMemory: false },
    };
    if (!report.cuda.available) {
      report.cuda.reason = cuda.unavailableReason();
      report.cuda.mapReason = 'no CUDA driver';
      return report;
    }
    report.cuda.driverVersion = cuda.driverVersion();
    for (let i = 0; i < cuda.deviceCount(); i++) report.cuda.devices.push(cuda.device(i));
    if (report.cuda.devices.length === 0) {
      report.cuda.mapReason = 'no CUDA devices';
      return report;
    }
    const probe = probeCudaMapping(context);
    report.cuda.canMapMemory = probe.ok;
    if (probe.reason) report.cuda.mapReason = probe.reason;
    return report;
  } finally {
    context.close();
  }
}

function formatGiB(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

function printText(r: InfoReport): void {
  const lines = [
    `gdrpc ${r.gdrpc.version} on Node.js ${r.gdrpc.node}`,
    `UCX ${r.ucx.version} (${r.ucx.source})`,
    `  library: ${r.ucx.libraryPath}`,
    `  transports: ${r.ucx.transports.join(', ') || 'none'}`,
    ...r.ucx.devices.map((d) => `    ${d.transport}/${d.device}`),
    `  memory types: ${r.ucx.memoryTypes.join(', ')}`,
    r.cuda.available
      ? `CUDA driver ${r.cuda.driverVersion}, ${r.cuda.devices.length} device(s)`
      : `CUDA: not available (${r.cuda.reason ?? 'unknown reason'})`,
    ...r.cuda.devices.map((d) => `  cuda:${d.index} ${d.name}, ${formatGiB(d.totalMemory)}, sm_${d.computeCapability.replace('.', '')}, pci ${d.pciBusId}`),
    `  CUDA memory mappable by UCX: ${r.cuda.canMapMemory ? 'yes' : `no (${r.cuda.mapReason})`}`,
  ];
  console.log(lines.join('\n'));
}

const command = {
  name: 'info',
  usage: `usage: gdrpc info [--json]

What this process's UCX and CUDA can do: the UCX version and library, its transports and
devices, memory types, CUDA driver and devices, and whether UCX can map CUDA memory.

options:
  --json       print the report as JSON
  -h, --help   this text

exit status: 0 reported; 1 the report could not be collected (UCX failed to load); 2 usage error.`,
  options: { json: { type: 'boolean' } },
} as const;

/** `gdrpc info [--json]` */
export async function runInfo(argv: string[]): Promise<number> {
  const args = parseCommandLine(command, argv);
  if (typeof args === 'number') return args;
  const report = collectInfo();
  if (args.values.json) console.log(JSON.stringify(report, null, 2));
  else printText(report);
  return 0;
}
