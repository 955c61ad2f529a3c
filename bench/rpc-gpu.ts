// Mover table for GPU memory: one call carrying a u8 tensor between two processes, per size and
// mover, host -> host and cuda:0 -> cuda:0 (sources and destinations in mapped pools; no
// noStaging, so that the staged RMA path is measured too). Prints one
// JSON row per measurement; run where there is a GPU (the host rows are the control).
//   node --import tsx bench/rpc-gpu.ts
import { fileURLToPath } from 'node:url';
import { Client, Server, cuda, type Tensor } from '../core/index.ts';
import { unsafeRmaEnabled } from '../core/rpc/runtime/runtime.ts';
import { spawnPeer } from '../test/support/peer.ts';
import { announceReady } from '../test/support/ready-line.ts';
import { GpuSink, GpuSinkDescriptor } from './schemas/gen/rpc_bench.ts';

const SIZES = [4096, 65536, 1 << 20, 16 << 20, 64 << 20];

if (process.argv[2] === '--serve') {
  const server = Server.create({ poolBytes: 512 << 20, maxTensorBytes: 256 << 20 });
  GpuSink.register(server, { host: () => ({}), cuda: () => ({}) });
  announceReady({ port: (await server.listen({ host: '127.0.0.1' })).port });
} else {
  const server = await spawnPeer<{ port: number }>(fileURLToPath(import.meta.url), { args: ['--serve'] });
  const client = await Client.connect(`127.0.0.1:${server.ready.port}`, { poolBytes: 256 << 20 });
  const devices = cuda.available() && cuda.deviceCount() > 0 ? (['cpu', 'cuda:0'] as const) : (['cpu'] as const);
  for (const device of devices) {
    for (const bytes of SIZES) {
      const x: Tensor = client.pool(device).allocate([bytes], 'u8');
      for (const mover of unsafeRmaEnabled() ? ['tag', 'rma'] as const : ['tag'] as const) {
        const method = GpuSinkDescriptor.methods[device === 'cpu' ? 'host' : 'cuda'];
        await client.unary(method, { x }, { mover });
        const samples: number[] = [];
        const until = performance.now() + 400;
        while (samples.length < 5 || (performance.now() < until && samples.length < 500)) {
          const t0 = performance.now();
          await client.unary(method, { x }, { mover });
          samples.push((performance.now() - t0) * 1000);
        }
        samples.sort((a, b) => a - b);
        const p50 = samples[Math.floor(samples.length / 2)]!;
        console.log(JSON.stringify({ device, mover, bytes, p50_us: Number(p50.toFixed(1)), gbps: Number((bytes / (p50 * 1000)).toFixed(2)) }));
      }
      x.release();
    }
  }
  await client.close();
  await server.dispose();
  process.exit(0);
}
