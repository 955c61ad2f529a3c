#!/usr/bin/env node
// Set-up for a fresh checkout, run by `npm install`: find UCX (GDRPC_UCX_HOME, else the
// pinned libucx-cu13 wheel installed into .deps/), then build the native addon against it.
// Everything it fetches comes from the PyPI and npm registries.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const depsDir = join(root, '.deps', 'python');
const buildDir = join(root, 'build');
const UCX_WHEEL = 'libucx-cu13==1.22.0';
const CUDA_HEADERS_WHEEL = 'nvidia-cuda-runtime==13.5.37';

function fail(message) {
  console.error(`gdrpc install: ${message}`);
  process.exit(1);
}

function run(cmd, args, what) {
  console.log(`gdrpc install: ${what}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.error) fail(`${what} failed: ${r.error.message}`);
  if (r.status !== 0) fail(`${what} failed (exit ${r.status})`);
}

function isUcxHome(home) {
  return existsSync(join(home, 'include', 'ucp', 'api', 'ucp.h')) &&
    (existsSync(join(home, 'lib', 'libucp.so')) || existsSync(join(home, 'lib64', 'libucp.so')));
}

function findPython() {
  for (const py of [process.env.PYTHON, 'python3', 'python'].filter(Boolean)) {
    const r = spawnSync(py, ['-m', 'pip', '--version'], { encoding: 'utf8' });
    if (r.status === 0) return py;
  }
  return null;
}

function resolveUcx() {
  const fromEnv = process.env.GDRPC_UCX_HOME;
  if (fromEnv) {
    const home = resolve(fromEnv);
    if (!isUcxHome(home)) {
      fail(`GDRPC_UCX_HOME=${fromEnv} is not a UCX install prefix (expected include/ucp/api/ucp.h and lib/libucp.so). ` +
        'Point it at a UCX prefix (for example /usr, /opt/hpcx/ucx) or unset it to use the bundled libucx-cu13 wheel.');
    }
    return { home, source: 'GDRPC_UCX_HOME' };
  }
  const wheelHome = join(depsDir, 'libucx');
  const cudaInclude = join(depsDir, 'nvidia', 'cu13', 'include');
  if (!isUcxHome(wheelHome) || !existsSync(join(cudaInclude, 'cuda.h'))) {
    const py = findPython();
    if (!py) {
      fail('no UCX found: GDRPC_UCX_HOME is unset and python3 with pip is not available to install ' +
        `${UCX_WHEEL}. Install python3-pip, or set GDRPC_UCX_HOME to a UCX install prefix.`);
    }
    mkdirSync(depsDir, { recursive: true });
    run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--upgrade',
      '--target', depsDir, UCX_WHEEL, CUDA_HEADERS_WHEEL], `installing ${UCX_WHEEL} and CUDA headers into .deps/`);
    if (!isUcxHome(wheelHome)) fail(`${UCX_WHEEL} installed but ${wheelHome} has no UCX headers and libraries`);
  }
  return { home: wheelHome, source: 'libucx-cu13 wheel' };
}

function resolveCudaInclude() {
  const candidates = [process.env.GDRPC_CUDA_INCLUDE, join(depsDir, 'nvidia', 'cu13', 'include'),
    '/usr/local/cuda/include'].filter(Boolean);
  const found = candidates.find((dir) => existsSync(join(dir, 'cuda.h')));
  if (found) return found;
  const py = findPython();
  if (!py) fail('no cuda.h found: set GDRPC_CUDA_INCLUDE to a CUDA include directory');
  run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--target', depsDir,
    CUDA_HEADERS_WHEEL], 'installing CUDA headers into .deps/');
  return join(depsDir, 'nvidia', 'cu13', 'include');
}

const ucx = resolveUcx();
const cudaInclude = resolveCudaInclude();
console.log(`gdrpc install: UCX from ${ucx.source}: ${ucx.home}`);

const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
run(process.execPath, [cmakeJs, process.argv.includes('--rebuild') ? 'rebuild' : 'compile',
  '--directory', join(root, 'native'), '--out', buildDir,
  `--CDUCX_HOME=${ucx.home}`, `--CDCUDA_INCLUDE=${cudaInclude}`], 'building the native addon');
if (!existsSync(join(buildDir, 'Release', 'gdrpc.node'))) fail('the build finished but build/Release/gdrpc.node is missing');
// Written after the build: `cmake-js rebuild` empties the build folder first.
mkdirSync(buildDir, { recursive: true });
writeFileSync(join(buildDir, 'gdrpc-build.json'),
  JSON.stringify({ ucxHome: ucx.home, ucxSource: ucx.source, cudaInclude }, null, 2) + '\n');
console.log('gdrpc install: done. Try `npx gdrpc info`.');
