// A fresh npm project outside this repository that installs the packed gdrpc tarball, the way a
// user's project would: npm's default layout, dependency install scripts allowed for gdrpc only.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** The environment of every command run in a consumer project: nothing of this repository's own set-up. */
export function consumerEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  // Vitest and tsx hooks of this repository must not leak into the consumer's processes.
  delete env.NODE_OPTIONS;
  delete env.VITEST;
  delete env.VITEST_WORKER_ID;
  delete env.TSX_TSCONFIG_PATH;
  return env;
}

export interface Run { code: number | null; stdout: string; stderr: string }

/** Runs `cmd args` in `cwd` to the end (never rejects; the caller asserts on the code). */
export function run(cmd: string, args: string[], cwd: string, timeoutMs = 600_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, env: consumerEnv(), timeout: timeoutMs, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Packs this repository with `npm pack` (its prepare script builds dist/) and returns the tarball. */
export async function packRepository(root: string, into: string): Promise<{ tarball: string; bytes: number; files: number }> {
  const r = await run('npm', ['pack', '--json', '--pack-destination', into], root, 300_000);
  if (r.code !== 0) throw new Error(`npm pack failed (${r.code}): ${r.stderr}`);
  const [info] = JSON.parse(r.stdout.slice(r.stdout.indexOf('['))) as Array<{ filename: string; size: number; entryCount: number }>;
  if (info === undefined) throw new Error(`npm pack printed no result: ${r.stdout}`);
  return { tarball: join(into, info.filename), bytes: info.size, files: info.entryCount };
}

export class ConsumerProject {
  readonly dir: string;

  /** A new project in a temporary folder with `fixture`'s files and a package.json of `type`. */
  constructor(name: string, fixture: string, type: 'module' | 'commonjs') {
    this.dir = mkdtempSync(join(tmpdir(), `gdrpc-consumer-${name}-`));
    cpSync(fixture, this.dir, { recursive: true });
    const pkg = { name: `consumer-${name}`, version: '1.0.0', private: true, type, allowScripts: { gdrpc: true } };
    writeFileSync(join(this.dir, 'package.json'), JSON.stringify(pkg, null, 2) + '\n');
  }

  /** `npm install <specs>`; throws with npm's output when it fails. */
  async install(specs: string[], dev = false): Promise<Run> {
    const r = await run('npm', ['install', ...(dev ? ['--save-dev'] : []), '--no-audit', '--no-fund', '--foreground-scripts', ...specs], this.dir);
    if (r.code !== 0) throw new Error(`npm install ${specs.join(' ')} failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
    return r;
  }

  /** Runs an installed package's bin (`node_modules/.bin/<name>`). */
  bin(name: string, args: string[]): Promise<Run> {
    return run(join(this.dir, 'node_modules', '.bin', name), args, this.dir);
  }

  node(args: string[]): Promise<Run> {
    return run(process.execPath, args, this.dir);
  }

  json(path: string): Record<string, unknown> {
    return JSON.parse(readFileSync(join(this.dir, path), 'utf8')) as Record<string, unknown>;
  }

  write(path: string, text: string): void {
    writeFileSync(join(this.dir, path), text);
  }

  /** Starts `node <script>` as a server that prints `port N`, and calls it with a client script. */
  async serveAndCall(server: string, client: string, clientArgs: string[] = []): Promise<Run> {
    const child = spawn(process.execPath, [server], { cwd: this.dir, env: consumerEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    try {
      const port = await firstPort(child);
      return await this.node([client, `127.0.0.1:${port}`, ...clientArgs]);
    } finally {
      child.stdin?.end();
      await new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) resolve();
        else child.once('exit', () => resolve());
      });
    }
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The port a server child prints as `port N`; rejects with its stderr if it exits first. */
function firstPort(child: ChildProcess): Promise<number> {
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      const m = /^port (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code, signal) => reject(new Error(`server exited (${code ?? signal}) before listening:\n${stderr}`)));
  });
}
