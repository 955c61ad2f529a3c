// A UCX that cannot map CUDA memory (here: the CUDA modules not loaded, UCX_MODULES=^cu*) must
// still move CUDA tensors, staged through host memory and reported as path 'staged', and a call
// that demands no staging must fail fast with FAILED_PRECONDITION instead.
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { announce, DRY_RUN, GPU_MOVERS, MiB, skipReason, topologies } from './fixtures/env.ts';
import { startGpuServer } from './fixtures/peer.ts';
import { disposePeers, runPeer } from '../support/peer.ts';

announce('test/gpu/staging.test.ts');

const NO_UCX_CUDA = { UCX_MODULES: '^cu*' };
const SIZES = [4096, 64 * MiB];

afterAll(disposePeers);

interface Report {
  memoryTypes: string[]; staged: boolean; stagingReason: string | null;
  outcomes: Array<{ size: number; mover: string; noStaging: string; code: string; mismatch: number | null; paths: string[] }>;
}

async function runStagedClient(settings: object): Promise<{ report: Report | undefined; output: string }> {
  const file = fileURLToPath(new URL('./fixtures/staged-client.ts', import.meta.url));
  const run = await runPeer(file, 150_000, { env: { ...NO_UCX_CUDA, GDRPC_STAGED: JSON.stringify(settings) }, echoStderr: false });
  const output = run.stdout + run.stderr;
  const line = /RESULT (.*)/.exec(output)?.[1];
  return { report: line === undefined ? undefined : JSON.parse(line) as Report, output };
}

describe.skipIf(skipReason !== undefined || DRY_RUN)('CUDA tensors with a UCX that cannot map CUDA memory', () => {
  const topology = topologies[0]!;
  it(`stages through host memory (path 'staged') and refuses with noStaging`, async () => {
    const server = await startGpuServer({ device: topology.server, poolBytes: 2 * 64 * MiB, ownPoolBytes: MiB, env: NO_UCX_CUDA });
    try {
      const { report, output } = await runStagedClient({ address: server.address, device: topology.client, sizes: SIZES, movers: [...GPU_MOVERS] });
      expect(report, `the staged client crashed or hung:\n${output.slice(-3000)}`).toBeDefined();
      console.log(`staging report: ${JSON.stringify(report)}`);
      expect(report!.memoryTypes).not.toContain('cuda');
      expect(report!.staged).toBe(true);
      expect(report!.stagingReason).toMatch(/CUDA/);
      for (const outcome of report!.outcomes) {
        const what = `${outcome.mover} ${outcome.size}`;
        expect(outcome.noStaging, what).toBe('FAILED_PRECONDITION');
        expect(outcome.code, what).toBe('OK');
        expect(outcome.mismatch, what).toBe(-1);
        expect(outcome.paths.length, what).toBe(2);
        for (const path of outcome.paths) expect(path, what).toMatch(/:staged$/);
      }
    } finally {
      server.kill();
    }
  }, 200_000);
});
