// The package as another project uses it: `npm pack`, then fresh projects outside the repository
// install the tarball with npm's default (hoisted) layout and run a server and a client as two
// plain `node` processes on what the package ships (dist/), with no tsx and none of this
// repository's node_modules. Needs the npm registry (the package's dependencies); the UCX wheel
// comes from the per-user cache that this repository's own `npm install` filled.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConsumerProject, packRepository, run } from './project.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const fixtures = fileURLToPath(new URL('./fixtures', import.meta.url));
const own = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
/** The same TypeScript, Node types and ts-morph this repository is built with, so runs repeat. */
const dev = ['typescript', '@types/node', 'ts-morph'].map((name) => `${name}@${own.devDependencies[name]}`);

const INSTALL_MS = 900_000;
let packDir: string;
let tarball: string;
const projects: ConsumerProject[] = [];

function project(name: string, fixture: string, type: 'module' | 'commonjs'): ConsumerProject {
  const p = new ConsumerProject(name, join(fixtures, fixture), type);
  projects.push(p);
  return p;
}

/** The Adder fixture's server and client agree on a sum, and a call with mismatched shapes is refused. */
async function expectAdderServes(p: ConsumerProject, server: string, client: string): Promise<void> {
  const call = await p.serveAndCall(server, client);
  expect(call.code, call.stderr).toBe(0);
  expect(JSON.parse(call.stdout)).toEqual({ sum: [11, 22, 33], refused: 'INVALID_ARGUMENT' });
}

beforeAll(async () => {
  packDir = mkdtempSync(join(tmpdir(), 'gdrpc-pack-'));
  const packed = await packRepository(root, packDir);
  tarball = packed.tarball;
  console.log(`npm pack: ${packed.files} files, ${(packed.bytes / 1024).toFixed(0)} KiB`);
}, INSTALL_MS);

afterAll(() => {
  for (const p of projects) p.remove();
  if (packDir !== undefined) rmSync(packDir, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('ships dist, the native sources and the install script, and no tests, benchmarks or TypeScript sources', () => {
    const files = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).split('\n').filter(Boolean)
      .map((f) => f.replace(/^package\//, ''));
    expect(files).toContain('dist/core/index.js');
    expect(files).toContain('dist/core/index.d.ts');
    expect(files).toContain('dist/codegen/index.js');
    expect(files).toContain('native/CMakeLists.txt');
    expect(files).toContain('scripts/install.mjs');
    expect(files).toContain('bin/gdrpc.js');
    expect(files.filter((f) => /^(test|bench|examples|\.ci|core|codegen|schemas)\//.test(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
  });

  it('ESM TypeScript project: generates stubs, type-checks under tsc --init and strict settings, runs on plain node', async () => {
    const p = project('esm-ts', 'esm-ts', 'module');
    const installed = await p.install([tarball]);
    // The UCX wheel is installed once per user; this project reuses it.
    expect(`${installed.stdout}${installed.stderr}`).toMatch(/UCX wheel found in the cache/);
    await p.install(dev, true);

    const init = await p.bin('tsc', ['--init']);
    expect(init.code, init.stdout + init.stderr).toBe(0);
    // What a user adds to tsc --init's file for a Node program: Node's types, and where sources
    // and output live. Everything else stays at the generated defaults.
    p.write('tsconfig.app.json', JSON.stringify({
      extends: './tsconfig.json',
      compilerOptions: { types: ['node'], rootDir: 'src', outDir: 'out' },
      include: ['src'],
    }, null, 2));
    p.write('tsconfig.strict.json', JSON.stringify({
      extends: './tsconfig.app.json',
      compilerOptions: {
        strict: true, exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true,
        verbatimModuleSyntax: true, module: 'nodenext', skipLibCheck: false, noEmit: true,
      },
    }, null, 2));

    const gen = await p.bin('gdrpc', ['gen', 'schemas', '--out', 'src/gen']);
    expect(gen.code, gen.stdout + gen.stderr).toBe(0);
    const generated = readFileSync(join(p.dir, 'src/gen/scale.ts'), 'utf8');
    expect(generated).toMatch(/from '\.\/units\.js'/);

    const strict = await p.bin('tsc', ['-p', 'tsconfig.strict.json']);
    expect(strict.code, strict.stdout + strict.stderr).toBe(0);
    // The package's declarations name no Node type: a program that uses gdrpc and nothing of
    // Node's compiles without @types/node (they named Buffer twice, until 2026-12-07).
    p.write('nonode-uses.ts', "import { Client, Tensor } from 'gdrpc';\nexport async function sum(address: string): Promise<number> {\n  const client = await Client.connect(address);\n  await client.close();\n  return Tensor.fromArray(new Float32Array([1, 2])).byteLength;\n}\n");
    p.write('tsconfig.nonode.json', JSON.stringify({
      extends: './tsconfig.json',
      compilerOptions: { types: [], strict: true, module: 'nodenext', skipLibCheck: false, noEmit: true },
      include: ['nonode-uses.ts'],
    }, null, 2));
    const nonode = await p.bin('tsc', ['-p', 'tsconfig.nonode.json']);
    expect(nonode.code, nonode.stdout + nonode.stderr).toBe(0);
    const build = await p.bin('tsc', ['-p', 'tsconfig.app.json']);
    expect(build.code, build.stdout + build.stderr).toBe(0);
    // A library's declarations of what it exports name gdrpc's types: Handler and TensorWire are
    // exported (without them: TS2883 and TS2305, found by a helper session using the package).
    p.write('tsconfig.decl.json', JSON.stringify({
      extends: './tsconfig.app.json',
      compilerOptions: { declaration: true, emitDeclarationOnly: true, outDir: 'decl' },
      include: ['src/exports.ts'],
    }, null, 2));
    const declarations = await p.bin('tsc', ['-p', 'tsconfig.decl.json']);
    expect(declarations.code, declarations.stdout + declarations.stderr).toBe(0);

    const call = await p.serveAndCall('out/server.js', 'out/client.js', ['cpu']);
    expect(call.code, call.stderr).toBe(0);
    const result = JSON.parse(call.stdout) as { values: number[]; sum: number; device: string; refused: string };
    expect(result.values).toEqual([2, 4, 6, 9]);
    expect(result.sum).toBe(21);
    expect(result.device).toBe('cpu');
    // factor 1e300 does not fit an f32: refused before it is sent.
    expect(result.refused).toBe('INVALID_ARGUMENT');
  }, INSTALL_MS);

  it('plain JavaScript project without TypeScript or tsx: a hand-written descriptor, server and client', async () => {
    const p = project('plain-js', 'plain-js', 'module');
    await p.install([tarball]);
    await expectAdderServes(p, 'server.mjs', 'client.mjs');
    // Neither tsx nor TypeScript nor ts-morph came with the runtime.
    for (const absent of ['tsx', 'typescript', 'ts-morph']) {
      const r = await p.node(['-e', `require.resolve(${JSON.stringify(absent)})`]);
      expect(r.code, `${absent} should not be installed`).not.toBe(0);
    }
    // Without ts-morph the generator says what to install instead of failing with a stack trace.
    p.write('one.gdrpc', 'package consumer.one.v1;\nservice One { rpc ping() -> (); }\n');
    const gen = await p.bin('gdrpc', ['gen', 'one.gdrpc', '--out', 'gen']);
    expect(gen.code).toBe(1);
    expect(gen.stderr).toMatch(/ts-morph/);
    expect(gen.stderr).not.toMatch(/\n\s+at /);
  }, INSTALL_MS);

  it('CommonJS project: require("gdrpc") on Node >= 20.19', async () => {
    const p = project('commonjs', 'commonjs', 'commonjs');
    await p.install([tarball]);
    await expectAdderServes(p, 'server.js', 'client.js');
  }, INSTALL_MS);

  // The install script finds cmake-js and node-addon-api by module resolution, so layouts where
  // they do not sit in the app's node_modules build the addon too.
  it('installs and runs in npm\'s nested layout', async () => {
    const p = project('nested', 'plain-js', 'module');
    const r = await run('npm', ['install', '--install-strategy=nested', '--no-audit', '--no-fund', tarball], p.dir);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(existsSync(join(p.dir, 'node_modules/gdrpc/node_modules/cmake-js'))).toBe(true);
    await expectAdderServes(p, 'server.mjs', 'client.mjs');
  }, INSTALL_MS);

  it('installs and runs in pnpm\'s isolated layout', async () => {
    const p = project('pnpm', 'plain-js', 'module');
    const pkg = p.json('package.json');
    p.write('package.json', JSON.stringify({ ...pkg, pnpm: { onlyBuiltDependencies: ['gdrpc'] } }, null, 2));
    // pnpm itself comes from the npm registry, as a user without it installed would get it.
    const r = await run('npx', ['--yes', 'pnpm@9', 'add', tarball], p.dir);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(existsSync(join(p.dir, 'node_modules/.pnpm'))).toBe(true);
    expect(existsSync(join(p.dir, 'node_modules/cmake-js'))).toBe(false);
    await expectAdderServes(p, 'server.mjs', 'client.mjs');
  }, INSTALL_MS);
});
