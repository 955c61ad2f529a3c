// The committed PTX (native/kernels/gdrpc.ptx) belongs to the committed CUDA source: its first line
// records the source's SHA-256 (scripts/build-ptx.sh writes it), and it defines every kernel that
// core/compute/kernels.ts loads. Runs everywhere; test/gpu/compute.test.ts also recompiles the
// source with the GPU machine's nvcc and compares.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { kernelsPtxPath } from '../../core/index.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const source = readFileSync(`${root}/native/kernels/gdrpc.cu`);
const ptx = readFileSync(kernelsPtxPath(), 'utf8');

describe('committed PTX', () => {
  it('lies where the runtime loads it from', () => {
    expect(kernelsPtxPath()).toBe(`${root}native/kernels/gdrpc.ptx`);
  });

  it('was built from the committed source (else: bash scripts/build-ptx.sh)', () => {
    const recorded = /^\/\/ gdrpc-source-sha256: ([0-9a-f]{64})$/m.exec(ptx.split('\n', 1)[0]!)?.[1];
    expect(recorded).toBe(createHash('sha256').update(source).digest('hex'));
  });

  it('defines every kernel the runtime asks for, with its parameter count', () => {
    const runtime = ['kernels.ts', 'blocks.ts'].map((file) => readFileSync(`${root}/core/compute/${file}`, 'utf8')).join('\n');
    const asked = [...runtime.matchAll(/module\.kernel\('(\w+)', (\w+|\[[^\]]*\])/g)].map((m) => m[1]!);
    expect(asked.length).toBeGreaterThanOrEqual(5);
    expect(asked).toEqual(expect.arrayContaining(['gdrpc_copy_blocks', 'gdrpc_copy_indexed']));
    for (const name of asked) {
      const entry = new RegExp(`\\.visible \\.entry ${name}\\(([^)]*)\\)`).exec(ptx);
      expect(entry, `${name} in the PTX`).not.toBeNull();
    }
  });
});
