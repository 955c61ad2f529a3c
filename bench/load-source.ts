// Which tree a load or contention run measured: core and native change often, and a figure
// means little without the commit and the uncommitted edits under them.
import { execFileSync } from 'node:child_process';

export interface SourceInfo { commit: string; changed: string[] }

/** The commit checked out and the files of core/ and native/ changed on top of it (undefined outside git). */
export function describeSource(): SourceInfo | undefined {
  try {
    const git = (...args: string[]): string => execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return { commit: git('rev-parse', 'HEAD'), changed: git('status', '--porcelain', '--', 'core', 'native').split('\n').filter(Boolean) };
  } catch {
    return undefined;
  }
}

/** The UCX_* variables of this process's environment (gdrpc adds its defaults there once loaded). */
export function ucxEnvironment(): Record<string, string> {
  return Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith('UCX_') && e[1] !== undefined).sort());
}
