#!/usr/bin/env node
// Runs at `npm install` of gdrpc, in its own checkout and in every project that depends on it:
// finds UCX, then builds the native addon against it.
//
// UCX comes from GDRPC_UCX_HOME when it is set, else from the pinned libucx-cu13 wheel (plus the
// CUDA headers wheel), installed once per machine and user into a cache that every project reuses
// ($GDRPC_CACHE_DIR, else $XDG_CACHE_HOME/gdrpc, else ~/.cache/gdrpc; one folder per version).
// The build tools (cmake-js, node-addon-api) are found by Node's module resolution from this
// package, so npm's hoisted and nested layouts and pnpm's isolated one all work. Everything it
// fetches comes from the PyPI and npm registries.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const buildDir = join(root, 'build');
const UCX_WHEEL = 'libucx-cu13==1.22.0';
const CUDA_HEADERS_WHEEL = 'nvidia-cuda-runtime==13.5.37';
// One cache folder per pair of pinned wheels: a new pin installs beside the old one.
const CACHE_KEY = 'libucx-cu13-1.22.0_nvidia-cuda-runtime-13.5.37';

function fail(message) {
  console.error(`gdrpc install: ${message}`);
  process.exit(1);
}

function run(cmd, args, what, cwd = root) {
  console.log(`gdrpc install: ${what}`);
  const r = spawnSync(cmd, args, { cwd, stdio: 'inherit' });
  if (r.error) fail(`${what} failed: ${r.error.message}`);
  if (r.status !== 0) fail(`${what} failed (exit ${r.status ?? r.signal})`);
}

/** True when `cmd --version` runs. */
function hasTool(cmd) {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
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

function cacheRoot() {
  if (process.env.GDRPC_CACHE_DIR) return resolve(process.env.GDRPC_CACHE_DIR);
  const xdg = process.env.XDG_CACHE_HOME;
  return join(xdg && xdg.startsWith('/') ? xdg : join(homedir(), '.cache'), 'gdrpc');
}

/**
 * The wheels' folder in the cache, installed there first when missing. pip writes into a
 * private temporary folder that is renamed into place, so two installs running at once never
 * see half a wheel: the second rename loses and its copy is removed.
 */
function wheelsInCache() {
  const dir = join(cacheRoot(), CACHE_KEY);
  const complete = (d) => isUcxHome(join(d, 'libucx')) && existsSync(join(d, 'nvidia', 'cu13', 'include', 'cuda.h'));
  if (complete(dir)) {
    console.log(`gdrpc install: UCX wheel found in the cache: ${dir}`);
    return dir;
  }
  const py = findPython();
  if (!py) {
    fail(`no UCX found: GDRPC_UCX_HOME is unset and python3 with pip is not available to install ${UCX_WHEEL}. ` +
      'Install pip (Debian/Ubuntu: apt-get install python3-pip), or set GDRPC_UCX_HOME to a UCX install prefix.');
  }
  try {
    mkdirSync(dirname(dir), { recursive: true });
  } catch (error) {
    fail(`cannot create the cache folder ${dirname(dir)} (${error.message}): set GDRPC_CACHE_DIR to a writable folder`);
  }
  const staging = `${dir}.partial-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--no-compile',
    '--target', staging, UCX_WHEEL, CUDA_HEADERS_WHEEL], `installing ${UCX_WHEEL} and CUDA headers into ${dir}`);
  if (!complete(staging)) {
    rmSync(staging, { recursive: true, force: true });
    fail(`${UCX_WHEEL} installed but has no UCX headers and libraries under libucx/`);
  }
  try {
    renameSync(staging, dir);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    if (!complete(dir)) fail(`cannot move the wheels into ${dir}: ${error.message}`);
  }
  return dir;
}

function resolveUcx() {
  const fromEnv = process.env.GDRPC_UCX_HOME;
  if (fromEnv) {
    const home = resolve(fromEnv);
    if (!isUcxHome(home)) {
      fail(`GDRPC_UCX_HOME=${fromEnv} is not a UCX install prefix (expected include/ucp/api/ucp.h and lib/libucp.so). ` +
        'Point it at a UCX prefix (for example /usr, /opt/hpcx/ucx) or unset it to use the libucx-cu13 wheel.');
    }
    return { home, source: 'GDRPC_UCX_HOME', cudaInclude: findCudaInclude() };
  }
  const wheels = wheelsInCache();
  return { home: join(wheels, 'libucx'), source: 'libucx-cu13 wheel', cudaInclude: join(wheels, 'nvidia', 'cu13', 'include') };
}

/** cuda.h for a GDRPC_UCX_HOME build: GDRPC_CUDA_INCLUDE, the system toolkit, else the cached wheel. */
function findCudaInclude() {
  const candidates = [process.env.GDRPC_CUDA_INCLUDE, '/usr/local/cuda/include'].filter(Boolean);
  const found = candidates.find((dir) => existsSync(join(dir, 'cuda.h')));
  return found ?? join(wheelsInCache(), 'nvidia', 'cu13', 'include');
}

/** A dependency's folder, found the way Node would find it from this package. */
function packageDir(name) {
  try {
    return dirname(createRequire(join(root, 'package.json')).resolve(`${name}/package.json`));
  } catch {
    fail(`cannot find the ${name} package from ${root}: reinstall gdrpc (it is one of its dependencies)`);
  }
}

if (!hasTool('cmake')) fail('cmake is not installed: install cmake >= 3.18 (Debian/Ubuntu: apt-get install cmake)');
const cxx = process.env.CXX || 'c++';
if (!hasTool(cxx)) fail(`no C++ compiler (${cxx}): install g++ (Debian/Ubuntu: apt-get install g++) or set CXX`);

const ucx = resolveUcx();
console.log(`gdrpc install: UCX from ${ucx.source}: ${ucx.home}`);
const cmakeJsDir = packageDir('cmake-js');
const cmakeJs = join(cmakeJsDir, JSON.parse(readFileSync(join(cmakeJsDir, 'package.json'), 'utf8')).bin['cmake-js']);
const cmakeArgs = ['--directory', join(root, 'native'), '--out', buildDir,
  `--CDUCX_HOME=${ucx.home}`, `--CDCUDA_INCLUDE=${ucx.cudaInclude}`, `--CDNODE_ADDON_API_DIR=${packageDir('node-addon-api')}`];
if (process.argv.includes('--rebuild')) {
  run(process.execPath, [cmakeJs, 'rebuild', ...cmakeArgs], 'building the native addon from scratch');
} else {
  // Configured every time (cmake-js `compile` would keep an existing build folder's settings, a
  // previous UCX included), then built incrementally.
  run(process.execPath, [cmakeJs, 'configure', ...cmakeArgs], 'configuring the native addon');
  run(process.execPath, [cmakeJs, 'build', ...cmakeArgs], 'building the native addon');
}
for (const name of ['gdrpc.node', 'gdrpc_env.node']) {
  if (!existsSync(join(buildDir, 'Release', name))) fail(`the build finished but build/Release/${name} is missing`);
}
// Written after the build: `cmake-js rebuild` empties the build folder first.
mkdirSync(buildDir, { recursive: true });
writeFileSync(join(buildDir, 'gdrpc-build.json'),
  JSON.stringify({ ucxHome: ucx.home, ucxSource: ucx.source, cudaInclude: ucx.cudaInclude }, null, 2) + '\n');
console.log('gdrpc install: done. Try `npx gdrpc info`.');
