// scripts/install.mjs on a machine that lacks what it needs: it stops before building, says what
// to install, and exits 1. Each case runs the script with a PATH holding only the tools named, so
// the real lookups fail; none of them reaches the build, so build/ is left as it is.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../../scripts/install.mjs', import.meta.url));
const folders: string[] = [];

/** The path of `tool` on this machine's PATH, or undefined. */
function which(tool: string): string | undefined {
  return (process.env.PATH ?? '').split(':').map((p) => join(p, tool))
    .find((candidate) => { try { return statSync(candidate).isFile(); } catch { return false; } });
}

/** The C++ compiler the build would use here (the script tries $CXX, else c++). */
const cxx = ['c++', 'g++'].find((tool) => which(tool) !== undefined) ?? 'c++';

/** A folder of links to the named tools (found on this machine's PATH), to use as the only PATH. */
function toolbox(tools: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-toolbox-'));
  folders.push(dir);
  for (const tool of tools) {
    const found = which(tool);
    if (found === undefined) throw new Error(`${tool} is not on this machine's PATH`);
    symlinkSync(found, join(dir, tool));
  }
  symlinkSync(process.execPath, join(dir, 'node'));
  return dir;
}

function install(env: NodeJS.ProcessEnv): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [script], { env, timeout: 60_000 }, (error, _stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stderr });
    });
  });
}

afterAll(() => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

describe('the install script on an incomplete machine', () => {
  it('without cmake: says to install cmake', async () => {
    const r = await install({ PATH: toolbox([]), HOME: process.env.HOME });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cmake is not installed: install cmake/);
  });

  it('without a C++ compiler: says to install g++ or set CXX', async () => {
    const r = await install({ PATH: toolbox(['cmake']), HOME: process.env.HOME, CXX: 'no-such-compiler' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no C\+\+ compiler \(no-such-compiler\): install g\+\+/);
  });

  it('without pip and with an empty cache: says to install pip or set GDRPC_UCX_HOME', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'gdrpc-empty-cache-'));
    folders.push(cache);
    const r = await install({ PATH: toolbox(['cmake', cxx]), HOME: process.env.HOME, CXX: cxx, GDRPC_CACHE_DIR: cache });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/python3 with pip is not available/);
    expect(r.stderr).toMatch(/GDRPC_UCX_HOME/);
  });

  it('with GDRPC_UCX_HOME that is not a UCX prefix: names the variable and what it lacks', async () => {
    const r = await install({ PATH: toolbox(['cmake', cxx]), HOME: process.env.HOME, CXX: cxx, GDRPC_UCX_HOME: tmpdir() });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/GDRPC_UCX_HOME=.* is not a UCX install prefix \(expected include\/ucp\/api\/ucp\.h/);
  });
});
