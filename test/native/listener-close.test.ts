// Closing a listener while peers are connecting (docs/binding.md "Closing a listener"): UCX 1.22
// keeps connections it accepted but whose request it has not delivered pointing at the listener,
// and a request arriving after ucp_listener_destroy crashed the process in UCX's async thread
// (openucx/ucx#11087; a C reproducer crashed 100 rounds of 100). The listener now ends such
// connections at their socket before it goes. The peers run in a child process: a crash is its
// exit status, not this test runner's.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const child = fileURLToPath(new URL('./listener-close-child.ts', import.meta.url));

function run(mode: 'pending' | 'racing') {
  const result = spawnSync(process.execPath, ['--import', 'tsx', child, mode], { encoding: 'utf8', timeout: 60_000 });
  const line = result.stdout.split('\n').find((l) => l.startsWith('{'));
  return { status: result.status, signal: result.signal, stderr: result.stderr, out: line === undefined ? undefined : JSON.parse(line) as Record<string, number> };
}

describe.skipIf(process.platform !== 'linux')('closing a listener while peers connect', () => {
  it('eight connections accepted but not yet requested: each is ended at its socket, nothing crashes, a live connection carries on', () => {
    const result = run('pending');
    expect(result.stderr).not.toMatch(/Segmentation|Aborted|core dumped/);
    expect(result).toMatchObject({ status: 0, signal: null });
    expect(result.out).toMatchObject({ drainedSockets: 8, drainsUnsettled: 0, length: 4 });
  });

  it('peers connecting and sending their requests throughout the close: nothing crashes', () => {
    for (let round = 0; round < 3; round += 1) {
      const result = run('racing');
      expect(result.stderr).not.toMatch(/Segmentation|Aborted|core dumped/);
      expect(result).toMatchObject({ status: 0, signal: null });
      expect(result.out).toMatchObject({ drainsUnsettled: 0, length: 4 });
      expect(result.out!.peers).toBeGreaterThan(0);
    }
  });
});
