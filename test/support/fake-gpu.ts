// A fake CUDA driver for tests of the GPU paths on a machine without one: device memory is host
// buffers at made-up addresses, and the two block-copy kernels are emulated from
// native/kernels/gdrpc.cu (the same u64 arithmetic, in BigInt).
// Every device access is bounds-checked against the allocation it starts in; an access that is not
// wholly inside one allocation is recorded in `violations` (on a GPU it would read or write
// whatever lies there). The real TypeScript stack (cuda.ts, CudaModule/CudaKernel.launch with its
// argument checks, CudaStream, CudaEvent, BlockCopier) runs on top of it.
import { native } from '../../core/native.ts';
import type { NativeCuda } from '../../core/ucx/native-types.ts';

interface Allocation { base: bigint; bytes: Uint8Array; device: number }

export interface FakeGpu {
  violations: string[];
  launches: Array<{ kernel: string; grid: number[]; args: bigint[] }>;
  calls: Record<string, number>;
  restore(): void;
}

export function installFakeGpu(deviceCount = 2): FakeGpu {
  const binding = native() as unknown as { cuda: NativeCuda };
  const real = binding.cuda;
  const allocations = new Map<bigint, Allocation>();
  let next = 0x7f00_0000_0000n;
  const violations: string[] = [];
  const launches: FakeGpu['launches'] = [];
  const calls: Record<string, number> = {};
  const count = (name: string): void => { calls[name] = (calls[name] ?? 0) + 1; };
  const functions = new Map<bigint, string>();
  let handles = 1n;

  const find = (address: bigint): Allocation | undefined => {
    for (const a of allocations.values()) if (address >= a.base && address < a.base + BigInt(a.bytes.length)) return a;
    return undefined;
  };
  /** `length` bytes at `address`, or undefined (recorded) when not inside one allocation. */
  const span = (address: bigint, length: bigint, what: string): Uint8Array | undefined => {
    if (length === 0n) return new Uint8Array(0);
    const a = find(address);
    if (a === undefined || address + length > a.base + BigInt(a.bytes.length)) {
      violations.push(`${what}: ${length} bytes at 0x${address.toString(16)} are outside every allocation`);
      return undefined;
    }
    const at = Number(address - a.base);
    return a.bytes.subarray(at, at + Number(length));
  };
  const view = (v: bigint | ArrayBufferView, bytes: number, what: string): Uint8Array | undefined =>
    typeof v === 'bigint' ? span(v, BigInt(bytes), what) : new Uint8Array(v.buffer, v.byteOffset, bytes);

  const u64 = (args: Uint8Array, offset: number): bigint => new DataView(args.buffer, args.byteOffset).getBigUint64(offset, true);
  const u32 = (args: Uint8Array, offset: number): bigint => BigInt(new DataView(args.buffer, args.byteOffset).getUint32(offset, true));
  const loadU32 = (address: bigint, what: string): bigint => {
    const s = span(address, 4n, what);
    return s === undefined ? 0n : BigInt(new DataView(s.buffer, s.byteOffset).getUint32(0, true));
  };
  const loadU64 = (address: bigint, what: string): bigint => {
    const s = span(address, 8n, what);
    return s === undefined ? 0n : new DataView(s.buffer, s.byteOffset).getBigUint64(0, true);
  };
  const copySpan = (dst: bigint, src: bigint, bytes: bigint, what: string): void => {
    const from = span(src, bytes, `${what} read`);
    const to = span(dst, bytes, `${what} write`);
    if (from !== undefined && to !== undefined) to.set(from);
  };

  const fake: NativeCuda = {
    available: () => true,
    unavailableReason: () => undefined,
    driverVersion: () => 12040,
    deviceCount: () => deviceCount,
    device: (index) => ({ index, name: 'fake', totalMemory: 1 << 30, pciBusId: '0', computeCapability: '9.0', uuid: `fake-${index}` }),
    canAccessPeer: () => true,
    memInfo: () => ({ free: 1 << 30, total: 1 << 30 }),
    alloc(device, bytes) {
      count('alloc');
      const base = next;
      next += BigInt(Math.ceil((bytes + 4096) / 4096) * 4096);  // a gap after every allocation
      allocations.set(base, { base, bytes: new Uint8Array(bytes), device });
      return base;
    },
    free(ptr) {
      count('free');
      if (!allocations.delete(ptr)) violations.push(`free of 0x${ptr.toString(16)}, not an allocation`);
    },
    allocHost: (bytes) => new ArrayBuffer(bytes),
    copy(dst, src, bytes) {
      count('copy');
      const from = view(src, bytes, 'cuMemcpy src');
      const to = view(dst, bytes, 'cuMemcpy dst');
      if (from !== undefined && to !== undefined) to.set(from);
    },
    memset(ptr, byte, bytes) {
      span(ptr, BigInt(bytes), 'memset')?.fill(byte);
    },
    pointerInfo: (ptr) => ({ memoryType: find(ptr) !== undefined ? 'cuda' : 'unregistered', device: find(ptr)?.device ?? 0 }),
    synchronize: () => { count('synchronize'); },
    moduleLoad: () => handles++,
    moduleUnload: () => undefined,
    moduleFunction(_device, _module, name) {
      const handle = handles++;
      functions.set(handle, name);
      return { handle, maxThreadsPerBlock: 1024 };
    },
    launch(_device, fn, grid, _block, _shared, _stream, args, offsets) {
      const name = functions.get(fn)!;
      if (name === 'gdrpc_copy_indexed') {
        const [blocks, dst, src, blockBytes, pieceBytes] = [0, 1, 2, 3, 4].map((i) => u64(args, offsets[i]!)) as [bigint, bigint, bigint, bigint, bigint];
        const n = u32(args, offsets[5]!);
        const pieces = u32(args, offsets[6]!);
        launches.push({ kernel: name, grid, args: [blocks, dst, src, blockBytes, pieceBytes, n, pieces] });
        const M = (x: bigint): bigint => BigInt.asUintN(64, x);
        const entries = n * pieces;
        for (let e = 0n; e < entries; e += 1n) {
          const k = e / pieces;
          const start = M((e - k * pieces) * pieceBytes);
          const diff = M(blockBytes - start);
          const length = pieceBytes < diff ? pieceBytes : diff;
          const d = loadU32(blocks + 4n * k, 'index table (dst)');
          const s = loadU32(blocks + 4n * (n + k), 'index table (src)');
          copySpan(M(dst + d * blockBytes + start), M(src + s * blockBytes + start), length, `gdrpc_copy_indexed entry ${e}`);
        }
      } else if (name === 'gdrpc_copy_blocks') {
        const table = u64(args, offsets[0]!);
        const bytes = u64(args, offsets[1]!);
        const n = u32(args, offsets[2]!);
        launches.push({ kernel: name, grid, args: [table, bytes, n] });
        for (let b = 0n; b < n; b += 1n) copySpan(loadU64(table + 8n * b, 'address table'), loadU64(table + 8n * (n + b), 'address table'), bytes, `gdrpc_copy_blocks entry ${b}`);
      } else {
        throw new Error(`fake driver: no emulation of ${name}`);
      }
    },
    streamCreate: () => handles++,
    streamDestroy: () => undefined,
    streamSynchronize: () => { count('streamSynchronize'); },
    streamQuery: () => true,
    streamWaitEvent: () => { count('streamWaitEvent'); },
    eventCreate: () => handles++,
    eventDestroy: () => undefined,
    eventRecord: () => undefined,
    eventQuery: () => true,
    eventSynchronize: () => { count('eventSynchronize'); },
    eventElapsed: () => 0,
    ipcExport: () => { throw new Error('fake driver: no IPC'); },
    ipcOpen: () => { throw new Error('fake driver: no IPC'); },
    ipcClose: () => undefined,
  };
  binding.cuda = fake;
  return { violations, launches, calls, restore: () => { binding.cuda = real; } };
}
