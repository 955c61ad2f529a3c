// One side of bench/isolation.ts: a client built from the gdrpc tree at argv[2] calls a test
// server of the same tree on port argv[3] and prints its figures as one JSON line.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, port] = process.argv.slice(2) as [string, string];
const core = await import(pathToFileURL(join(root, 'core/index.ts')).href);
// The test server's Echo as that tree declares it: generated in newer trees, hand-written in
// test/rpc/fixtures/services.ts in trees from before test/schemas (the usual baseline).
const generated = join(root, 'test/schemas/gen/rpc/echo.ts');
const Echo = existsSync(generated)
  ? (await import(pathToFileURL(generated).href)).EchoDescriptor
  : (await import(pathToFileURL(join(root, 'test/rpc/fixtures/services.ts')).href)).Echo;
const MiB = 1 << 20;

const client = await core.Client.connect(`127.0.0.1:${port}`, { poolBytes: 256 * MiB });
const p50 = (samples: number[]): number => samples.sort((a, b) => a - b)[Math.floor(samples.length / 2)]!;

async function latency(calls: number): Promise<number> {
  for (let i = 0; i < 200; i += 1) await client.unary(Echo.methods.ping, { n: i });
  const samples: number[] = [];
  for (let i = 0; i < calls; i += 1) {
    const t0 = performance.now();
    await client.unary(Echo.methods.ping, { n: i });
    samples.push((performance.now() - t0) * 1000);
  }
  return p50(samples);
}

async function rate(bytes: number, seconds: number): Promise<number> {
  const x = core.Tensor.fromArray(new Uint8Array(bytes).fill(3));
  await client.unary(Echo.methods.sink, { x }, { mover: 'tag' });
  let done = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000 || done < 3) {
    await client.unary(Echo.methods.sink, { x }, { mover: 'tag' });
    done += 1;
  }
  return (done * bytes) / ((performance.now() - t0) / 1000) / 1e9;
}

const result = { small_call_p50_us: await latency(3000), host_1MiB_GBps: await rate(MiB, 2), host_64MiB_GBps: await rate(64 * MiB, 3) };
await client.close();
process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
process.exit(0);
