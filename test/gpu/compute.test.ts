// GPU compute (issue 13): PTX modules, launches, streams and events; gdrpc's kernels against their
// host twins (bit for bit for fill, add and checksum; within f16 rounding for gemm, odd shapes
// included); a stream-ordered send that does not wait for unrelated GPU work; and the committed
// PTX against the source recompiled with this machine's nvcc. CPU side: test/compute.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client, closeProcessPools, Code, CudaEvent, CudaModule, CudaStream, fromHalf, hostChecksum, kernelsPtxPath,
  loadKernels, producedOn, Tensor, type Kernels,
} from '../../core/index.ts';
import { thrown } from '../rpc/fixtures/thrown.ts';
import { announce, DRY_RUN, skipReason } from './fixtures/env.ts';
import { disposePeers } from '../support/peer.ts';
import { startServerProcess, type GpuPeer } from './fixtures/peer.ts';
import { PlacementDescriptor } from '../schemas/gen/gpu/placement.ts';
import { byteSum } from './fixtures/host-pattern.ts';

announce('test/gpu/compute.test.ts');
const skip = skipReason ?? (DRY_RUN ? 'the dry run has no GPU to compute on (test/compute runs the host kernels)' : undefined);
if (skip !== undefined) console.log(`test/gpu/compute.test.ts skipped: ${skip}`);

const ptx = (): string => readFileSync(kernelsPtxPath(), 'utf8');
const host = loadKernels('cpu');

/** The same f16 tensor on the host and on cuda:0, filled by the host twin. */
function pair(shape: number[], seed: number): { cpu: Tensor; gpu: Tensor } {
  const cpu = Tensor.zeros(shape, 'f16');
  host.fill(cpu, { seed });
  return { cpu, gpu: cpu.to('cuda:0') };
}

describe.skipIf(skip !== undefined)('GPU compute', () => {
  let gpu: Kernels;
  beforeAll(() => { gpu = loadKernels('cuda:0'); });
  afterAll(() => gpu?.close());

  it('a module that does not compile fails INVALID_ARGUMENT with the driver error and the JIT log', () => {
    const error = thrown(() => CudaModule.load(0, '.version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken( { bogus; }\n'));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.details?.cudaError).toBe('CUDA_ERROR_INVALID_PTX');
    expect(error.message).toMatch(/cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX .*: .+/);
  });

  it('an unknown kernel and bad launches are refused before the GPU sees them', () => {
    const module = CudaModule.load(0, ptx());
    try {
      const missing = thrown(() => module.kernel('no_such_kernel', []));
      expect(missing.details?.cudaError).toBe('CUDA_ERROR_NOT_FOUND');
      expect(missing.message).toContain('no_such_kernel');
      const fill = module.kernel('gdrpc_fill_f16', ['ptr', 'u64', 'u32', 'f32']);
      const t = Tensor.zeros([4], 'f16');
      expect(thrown(() => fill.launch({ grid: 1, block: 1 }, t, 4, 1, 1)).message).toMatch(/a tensor on cpu for a kernel on cuda:0/);
      expect(thrown(() => fill.launch({ grid: 1, block: 1 }, 0n, 4)).message).toMatch(/takes 4 arguments, got 2/);
      expect(thrown(() => fill.launch({ grid: 1, block: 2048 }, 0n, 4, 1, 1)).message).toMatch(/block\[0\] must be an integer in \[1, 1024\]/);
      expect(thrown(() => fill.launch({ grid: 1, block: 1 }, 0n, 4, -1, 1)).message).toMatch(/argument 2 \(u32\)/);
      module.close();
      expect(thrown(() => fill.launch({ grid: 1, block: 1 }, 0n, 0, 1, 1)).message).toMatch(/module is closed/);
    } finally {
      module.close();
    }
  });

  it('streams and events: order, waiting, elapsed GPU time', async () => {
    const module = CudaModule.load(0, ptx());
    const spin = module.kernel('gdrpc_spin', ['u64']);
    const [a, b] = [CudaStream.create(0), CudaStream.create(0)];
    const [start, end] = [CudaEvent.create(0, { timing: true }), CudaEvent.create(0, { timing: true })];
    try {
      start.record(a);
      spin.launch({ grid: 1, block: 1, stream: a }, 500_000_000);
      end.record(a);
      // b waits on the GPU for a's spin; the host waits for nothing.
      b.waitFor(end);
      const afterB = b.record();
      expect(end.done).toBe(false);
      expect(afterB.done).toBe(false);
      await afterB.finished();
      expect(end.done).toBe(true);
      expect(a.idle).toBe(true);
      // The kernel spun on the GPU clock for 500 ms: the events measured at least that.
      expect(end.elapsedSince(start)).toBeGreaterThanOrEqual(499);
      expect(thrown(() => afterB.elapsedSince(start)).message).toMatch(/timing: true/);
    } finally {
      for (const x of [a, b, start, end, module]) x.close();
    }
  });

  it.each([1, 255, 4097, (1 << 20) + 3])('fill, add and checksum of %i elements equal the host twins bit for bit', async (n) => {
    const x = pair([n], 11);
    const y = pair([n], 12);
    const filled = Tensor.zeros([n], 'f16', { device: 'cuda:0' });
    gpu.fill(filled, { seed: 11 });
    await gpu.finished();
    expect(filled.equals(x.cpu)).toBe(true);
    const [bfGpu, bfCpu] = [Tensor.zeros([n], 'bf16', { device: 'cuda:0' }), Tensor.zeros([n], 'bf16')];
    gpu.fill(bfGpu, { seed: 13, scale: 4 });
    host.fill(bfCpu, { seed: 13, scale: 4 });
    await gpu.finished();
    expect(bfGpu.equals(bfCpu)).toBe(true);
    const sum = { cpu: Tensor.zeros([n], 'f16'), gpu: Tensor.zeros([n], 'f16', { device: 'cuda:0' }) };
    host.add(sum.cpu, x.cpu, y.cpu);
    gpu.add(sum.gpu, x.gpu, y.gpu);
    expect(await gpu.checksum(sum.gpu)).toBe(hostChecksum(sum.cpu.bytes()));
    expect(sum.gpu.to('cpu').equals(sum.cpu)).toBe(true);
  });

  it('checksum of raw bytes of odd lengths equals the host twin', async () => {
    for (const n of [1, 3, 5, 4099, (1 << 22) + 1]) {
      const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 131 + 17) & 0xff);
      expect(await gpu.checksum(Tensor.fromArray(bytes).to('cuda:0')), `${n} bytes`).toBe(hostChecksum(bytes));
    }
  });

  it.each([
    [1, 1, 1], [7, 33, 65], [16, 64, 64], [17, 15, 130], [65, 100, 63], [8, 4096, 512],
  ])('gemm %i x %i x %i with bias, ReLU and residual agrees with the host twin', async (m, k, n) => {
    const [a, b, bias, residual] = [pair([m, k], 1), pair([k, n], 2), pair([n], 3), pair([m, n], 4)];
    for (const options of [{}, { relu: true, bias: true, residual: true }]) {
      const outCpu = Tensor.zeros([m, n], 'f16');
      const outGpu = Tensor.zeros([m, n], 'f16', { device: 'cuda:0' });
      const pick = (side: 'cpu' | 'gpu') => ({
        ...('bias' in options ? { bias: bias[side] } : {}), ...('residual' in options ? { residual: residual[side] } : {}), relu: 'relu' in options,
      });
      host.gemm(outCpu, a.cpu, b.cpu, pick('cpu'));
      gpu.gemm(outGpu, a.gpu, b.gpu, pick('gpu'));
      await gpu.finished();
      const want = Array.from(outCpu.toArray() as Uint16Array, fromHalf);
      const got = Array.from(outGpu.to('cpu').toArray() as Uint16Array, fromHalf);
      // f32 on the GPU against f64 on the host, each rounded to f16 once: at most an ulp or two apart.
      const worst = got.reduce((w, v, i) => Math.max(w, Math.abs(v - want[i]!) - Math.abs(want[i]!) * 2 ** -9), 0);
      expect(worst).toBeLessThanOrEqual(2 ** -14);
    }
  });

  it('gemm at the tensor-parallel size: time per call (printed)', async () => {
    const [a, b] = [Tensor.zeros([8, 4096], 'f16', { device: 'cuda:0' }), Tensor.zeros([4096, 8192], 'f16', { device: 'cuda:0' })];
    const out = Tensor.zeros([8, 8192], 'f16', { device: 'cuda:0' });
    gpu.fill(a, { seed: 1 });
    gpu.fill(b, { seed: 2 });
    const [start, end] = [CudaEvent.create(0, { timing: true }), CudaEvent.create(0, { timing: true })];
    gpu.gemm(out, a, b);
    start.record(gpu.stream!);
    for (let i = 0; i < 10; i += 1) gpu.gemm(out, a, b);
    end.record(gpu.stream!);
    await end.finished();
    const ms = end.elapsedSince(start) / 10;
    console.log(`gemm 8 x 4096 x 8192 f16: ${(ms * 1000).toFixed(1)} us per call, ${((2 * 8 * 4096 * 8192) / (ms * 1e6)).toFixed(0)} GFLOP/s, weights read at ${((4096 * 8192 * 2) / (ms * 1e6)).toFixed(0)} GB/s`);
    expect(ms).toBeGreaterThan(0);
    start.close();
    end.close();
  });
});

describe.skipIf(skip !== undefined)('stream-ordered send', () => {
  let server: GpuPeer;
  let client: Client;
  let module: CudaModule;
  beforeAll(async () => {
    server = await startServerProcess('./placement-server.ts', { GDRPC_PLACEMENT_SERVER: '{}' });
    client = await Client.connect(server.address, { poolBytes: 16 << 20 });
    module = CudaModule.load(0, ptx());
  });
  afterAll(async () => {
    await client?.close();
    module?.close();
    await closeProcessPools();
    await disposePeers();
  });

  const SPIN_NS = 3_000_000_000;
  const n = 1 << 20;
  const { take } = PlacementDescriptor.methods;

  /** Sends x (filled on `producer`) while a 3 s kernel runs on another stream; returns how long
   *  the call took, whether the spin was still running when it returned, and the sums. */
  async function sendDuringSpin(marked: boolean): Promise<{ ms: number; spinDoneAtReturn: boolean; sums: string; expected: string }> {
    const spin = module.kernel('gdrpc_spin', ['u64']);
    const fill = module.kernel('gdrpc_fill_f16', ['ptr', 'u64', 'u32', 'f32']);
    const [busy, producer] = [CudaStream.create(0), CudaStream.create(0)];
    const spinEnd = CudaEvent.create(0);
    const x = Tensor.empty([n], 'u8', { device: 'cuda:0' });
    // x, z and h share the schema's n.
    const z = Tensor.fromArray(new Uint8Array(n).fill(1)).to('cuda:0');
    const h = Tensor.fromArray(new Uint8Array(n).fill(2));
    try {
      spin.launch({ grid: 1, block: 1, stream: busy }, SPIN_NS);
      spinEnd.record(busy);
      fill.launch({ grid: 256, block: 256, stream: producer }, x.address, n / 2, 9, 1);
      if (marked) { producedOn(x, producer); producedOn(z, producer); }
      const t0 = performance.now();
      const result = await client.unary(take, { x, z, h }) as { sums: string };
      const ms = performance.now() - t0;
      const spinDoneAtReturn = spinEnd.done;
      await producer.finished();
      const expected = `${byteSum(x.to('cpu').bytes())} ${n} ${2 * n}`;
      await busy.finished();
      return { ms, spinDoneAtReturn, sums: result.sums, expected };
    } finally {
      for (const t of [x, z, h]) t.release();
      for (const c of [busy, producer, spinEnd]) c.close();
    }
  }

  it('a tensor that names its producer waits for that stream only; another waits for the device', async () => {
    // Warm-up: connection, pools, cuda_ipc handles.
    await client.unary(take, { x: Tensor.zeros([n], 'u8', { device: 'cuda:0' }), z: Tensor.zeros([n], 'u8', { device: 'cuda:0' }), h: Tensor.zeros([n], 'u8') });
    const ordered = await sendDuringSpin(true);
    const synced = await sendDuringSpin(false);
    console.log(`1 MiB send while a 3 s kernel runs on another stream: producer event ${ordered.ms.toFixed(2)} ms, device synchronize ${synced.ms.toFixed(2)} ms`);
    expect(ordered.sums).toBe(ordered.expected);
    expect(synced.sums).toBe(synced.expected);
    // The event path returned while the unrelated kernel still ran; cuCtxSynchronize waited for it.
    expect(ordered.spinDoneAtReturn).toBe(false);
    expect(synced.spinDoneAtReturn).toBe(true);
    expect(synced.ms).toBeGreaterThanOrEqual(2900);
  });
});

describe.skipIf(skip !== undefined)('committed PTX', () => {
  const nvcc = [process.env.NVCC, '/usr/local/cuda/bin/nvcc'].find((p) => p !== undefined && existsSync(p));
  it('matches the source compiled by this machine\'s nvcc (when the versions agree)', () => {
    if (nvcc === undefined) {
      console.log('committed PTX: no nvcc on this machine (set NVCC): not recompiled');
      return;
    }
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), 'gdrpc-ptx-'));
    try {
      execFileSync('bash', [join(root, 'scripts/build-ptx.sh'), dir], { env: { ...process.env, NVCC: nvcc }, stdio: 'pipe' });
      const fresh = readFileSync(join(dir, 'gdrpc.ptx'), 'utf8');
      const release = (text: string): string | undefined => /Cuda compilation tools, release ([\d.]+)/.exec(text)?.[1];
      if (release(fresh) !== release(ptx())) {
        console.log(`committed PTX: built by nvcc ${release(ptx())}, this machine has ${release(fresh)}: compared by source hash only (test/compute/ptx.test.ts)`);
        expect(fresh.split('\n', 1)[0]).toBe(ptx().split('\n', 1)[0]);
        return;
      }
      expect(fresh).toBe(ptx());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
