// A worker thread that ends with UCX objects open (docs/binding.md "Lifetime"): its environment's
// teardown closes them without calling into JS, and waits until the library's event-loop handles
// are released before Node unloads the addon from that thread. Before, the close made JS values
// without a scope (the process aborted) and a handle's close callback ran in unloaded code (the
// process crashed). The threads run in a child process: a crash is its exit status, not this
// runner's.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { UCX_DEFAULTS } from '../../core/native.ts';

const child = fileURLToPath(new URL('./thread-teardown-child.ts', import.meta.url));

/** The child's environment: none of gdrpc's UCX defaults (as for a process started from a shell),
 *  so that only the first thread to load the addon (a worker thread, not the main one) can put them
 *  there; UCX's memory-hook log on (UCX logs to stdout), which says whether it installed the hooks. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, UCX_MEM_LOG_LEVEL: 'info' };
  for (const name of Object.keys(UCX_DEFAULTS)) delete env[name];
  return env;
}

describe('a worker thread ending with UCX objects open', () => {
  it('process.exit, an uncaught throw, terminate() from outside and an RPC call in flight: each thread ends, the process and its main thread live on', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', child, 'exit', 'throw', 'terminate', 'rpc'], { encoding: 'utf8', timeout: 120_000, env: childEnv() });
    expect(result.stderr).not.toMatch(/Segmentation|Aborted|core dumped|FATAL ERROR/);
    // UCX_MEM_EVENTS=no reached UCX although the addon was first loaded in a worker thread, whose
    // process.env getenv does not read: installed, the hooks' self-test moved the heap's end under
    // the other threads' malloc (rarely a heap abort, "break adjusted to free malloc space").
    expect(`${result.stdout}${result.stderr}`).not.toMatch(/mmap installed events|installing \w+ hook/);
    expect({ status: result.status, signal: result.signal }).toEqual({ status: 0, signal: null });
    const line = result.stdout.split('\n').find((l) => l.startsWith('{'));
    expect(JSON.parse(line!)).toEqual({
      // Each mode twice: exit codes as Node gives them (1 for a throw and for terminate()).
      exits: { exit: [0, 0], throw: [1, 1], terminate: [1, 1], rpc: [0, 0] },
      main: 'alive',
    });
  });
});
