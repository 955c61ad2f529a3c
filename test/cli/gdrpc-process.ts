// Runs the gdrpc command as a user does: a separate process through bin/gdrpc.js, which loads
// dist/ (rebuilt from the sources by the vitest global set-up).
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const bin = fileURLToPath(new URL('../../bin/gdrpc.js', import.meta.url));
const run = promisify(execFile);

export interface Exit {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  cwd?: string;
  /** Node options placed before the script (e.g. an --import hook). */
  node?: string[];
  /** Added to this process's environment. */
  env?: NodeJS.ProcessEnv;
}

/** Runs `gdrpc ...args` and returns its exit status and output; never throws on a non-zero exit. */
export function gdrpc(args: string[], options: RunOptions = {}): Promise<Exit> {
  return runScript(bin, args, options);
}

/** Runs a Node.js script (another copy of bin/gdrpc.js, tsc) the same way. */
export async function runScript(script: string, args: string[], options: RunOptions = {}): Promise<Exit> {
  const argv = [...(options.node ?? []), script, ...args];
  try {
    const { stdout, stderr } = await run(process.execPath, argv, { timeout: 60_000, cwd: options.cwd, env: { ...process.env, ...options.env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}
