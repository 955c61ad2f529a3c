// Examples run their services in child processes (as real deployments would): this starts the
// same file with a role, waits for "LISTENING <port>", and kills the children on exit.
import { spawn, type ChildProcess } from 'node:child_process';
import { cuda, type Device } from '../core/index.ts';

const children = new Set<ChildProcess>();
process.on('exit', () => { for (const child of children) child.kill('SIGKILL'); });

/** The role this process was started with (`--role=<name>`), or undefined for the main program. */
export function role(): string | undefined {
  return process.argv.find((arg) => arg.startsWith('--role='))?.slice(7);
}

/** Starts `file` with `--role=<name>` (and extra args); resolves to "127.0.0.1:<port>". */
export function startRole(file: string, name: string, args: string[] = []): Promise<string> {
  const child = spawn(process.execPath, [...(process.env.EX_TRACE ? ['--import', process.env.EX_TRACE] : []), '--import', 'tsx', file, `--role=${name}`, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise((resolve, reject) => {
    let seen = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      const match = /LISTENING (\d+)/.exec(seen);
      if (match) resolve(`127.0.0.1:${match[1]}`);
      // What the role prints besides its port shows up in the example's output.
      const lines = seen.split('\n');
      seen = lines.pop()!;
      for (const line of lines) if (!line.startsWith('LISTENING ')) process.stdout.write(`[${name}] ${line}\n`);
    });
    child.once('exit', (code, signal) => reject(new Error(`${name} exited (${code ?? signal}) before listening`)));
  });
}

/** Tells the parent where this role listens. */
export function announce(port: number): void {
  process.stdout.write(`LISTENING ${port}\n`);
}

/** The device the examples put tensors on: GPU `rank` (modulo how many there are) where there is
 *  one, else host memory. */
export function exampleDevice(rank = 0): Device {
  return cuda.available() && cuda.deviceCount() > 0 ? `cuda:${rank % cuda.deviceCount()}` : 'cpu';
}
