// The examples run end to end (each starts its own peer processes) and print what they promise.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));

function run(example: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', `examples/${example}.ts`], { cwd: root, timeout: 90_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${example} failed: ${error.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

describe('examples', () => {
  it('echo', async () => {
    const out = await run('echo');
    expect(out).toMatch(/echo: "hello", 1048576 bytes back, equal: true/);
    expect(out).toMatch(/repeat: 0:hi 1:hi 2:hi/);
    expect(out).toMatch(/collect: 3 chunks, 60000 bytes/);
  });

  it('tensor-parallel', async () => {
    const out = await run('tensor-parallel');
    // With a GPU the example runs its full size on it and skips the host reference (the GPU
    // machine runs this file too).
    const onGpu = /2 shards on cuda:/.test(out);
    expect(out).toMatch(onGpu ? /tensor-parallel MLP: 2 shards on cuda:\d+, cuda:\d+; batch \d+, model \d+, hidden \d+, \d+ layers/ : /tensor-parallel MLP: 2 shards on cpu, cpu; batch 4, model 128, hidden 512, 3 layers/);
    expect(out).toMatch(/on rank 0 per step: compute [\d.]+ ms, all-reduce [\d.]+ ms/);
    expect(out).toMatch(/outputs identical on every shard: true/);
    expect(out).toMatch(onGpu ? /host reference: skipped for this size/ : /host reference: max \|error\| \S+ of max \|y\| \S+ \(ok\)/);
  });

  it('kv-handover', async () => {
    const out = await run('kv-handover');
    expect(out).toMatch(/\[decode\] decode: pulled 12 blocks \(196608 bytes\)/);
    expect(out).toMatch(/prefill: 6 blocks handed over/);
    expect(out).toMatch(/generate: (\d+ ){7}\d+/);
    // By value: every block in a gathered tag message, checked on arrival.
    expect(out).toMatch(/\[decode\] decode: received 12 blocks \(196608 bytes\) of req-2 by value into \S+, 12 of them in shared tag messages; checksums verified/);
    expect(out).toMatch(/prefill: 6 blocks handed over by value in [\d.]+ ms, state 1/);
    expect(out).toMatch(/\[decode\] decode: pulled 6 pool blocks \(196608 bytes\) of req-3 from \S+ into blocks of this worker's pool on \S+ in [\d.]+ ms \(one pullBlocks, (direct|two-sided), block table 11,48,21,58\.\.\. -> \d+,\d+,\d+,\d+\.\.\.\); checksums verified/);
    expect(out).toMatch(/prefill: 6 blocks handed over from its paged pool in [\d.]+ ms, state 1/);
  });

  it('gdr-rpc', async () => {
    const out = await run('gdr-rpc');
    expect(out).toMatch(/forward \(tag\): [\d.]+ ms per call \(20 calls, noStaging\)/);
    expect(out).toMatch(/forward \(rma\): ([\d.]+ ms per call|refused as asked)/);
  });
});
