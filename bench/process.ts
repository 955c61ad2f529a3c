// External programs of the benchmarks (ucx_perftest, Python, CPU hogs), always bounded: each runs
// under coreutils `timeout` in a process group of its own, and the whole group is killed on our
// own deadline too, so a stuck one (a Python child, a ucx_perftest server) can never outlive its
// step. The benchmarks' own Node peers are test/support peers (test/support/peer.ts).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';

export interface Finished { code: number | null; stdout: string; stderr: string; timedOut: boolean }

const hasTimeout = spawnSync('timeout', ['--version'], { stdio: 'ignore' }).status === 0;

/** A started program: its output so far, its end, and a kill for its whole group. */
export interface Running {
  child: ChildProcess;
  output(): string;
  finished: Promise<Finished>;
  kill(): void;
}

/** Starts `command` with a hard limit of `limitMs`. */
export function start(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; limitMs: number; cwd?: string }): Running {
  const seconds = Math.max(1, Math.ceil(options.limitMs / 1000));
  const [file, argv] = hasTimeout ? ['timeout', ['-k', '5', String(seconds), command, ...args]] : [command, args];
  const child = spawn(file, argv, { env: options.env ?? process.env, cwd: options.cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let timedOut = false;
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk; });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
  const kill = (): void => {
    try { if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
  };
  const timer = setTimeout(() => { timedOut = true; kill(); }, options.limitMs + 10_000);
  const finished = new Promise<Finished>((resolve) => {
    child.on('error', (error) => { stderr += String(error); });
    child.on('close', (code) => {
      clearTimeout(timer);
      // Leftovers of the group (e.g. grandchildren) go with it.
      kill();
      resolve({ code, stdout, stderr, timedOut: timedOut || code === 124 || code === 137 });
    });
  });
  return { child, output: () => stdout + stderr, finished, kill };
}

/** Runs `command` to its end (or its limit). */
export function run(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; limitMs: number; cwd?: string }): Promise<Finished> {
  return start(command, args, options).finished;
}

/** Resolves when `running` printed something matching `pattern` (or after `waitMs` regardless). */
export async function waitForOutput(running: Running, pattern: RegExp, waitMs: number): Promise<boolean> {
  const until = Date.now() + waitMs;
  while (Date.now() < until) {
    if (pattern.test(running.output())) return true;
    if (running.child.exitCode !== null) return false;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}
