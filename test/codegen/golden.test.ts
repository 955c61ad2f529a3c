// Golden files: every fixture under fixtures/ is regenerated and compared byte for byte with its
// committed expected/ output; the project's own schemas/gen, and the test and bench services'
// test/schemas/gen and bench/schemas/gen, are checked for staleness through `gen --check` itself.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { emitModules } from '../../codegen/emit/module.ts';
import { runGen } from '../../codegen/gen.ts';
import { compileFixture, fixturesDir, folders, repoRoot, updateGolden } from './fixture-files.ts';

function listTs(dir: string, prefix = ''): string[] {
  let out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out = out.concat(listTs(path.join(dir, e.name), `${prefix}${e.name}/`));
    else if (e.name.endsWith('.ts')) out.push(`${prefix}${e.name}`);
  }
  return out.sort();
}

describe.each(folders(fixturesDir))('fixture %s', (name) => {
  const dir = path.join(fixturesDir, name);
  const expectedDir = path.join(dir, 'expected');

  it('compiles without errors, with exactly the warnings in warnings.txt (none when absent)', () => {
    const result = compileFixture(dir);
    expect(result.diags.hasErrors, result.diags.format(result.sources)).toBe(false);
    const warnings = result.diags.format(result.sources);
    const file = path.join(dir, 'warnings.txt');
    if (updateGolden && warnings !== '') writeFileSync(file, warnings + '\n');
    expect(warnings === '' ? '' : warnings + '\n').toBe(existsSync(file) ? readFileSync(file, 'utf8') : '');
  });

  it('generates exactly the committed expected output', () => {
    const result = compileFixture(dir);
    const files = emitModules(result.ir);
    if (updateGolden) {
      rmSync(expectedDir, { recursive: true, force: true });
      for (const f of files) {
        mkdirSync(path.dirname(path.join(expectedDir, f.path)), { recursive: true });
        writeFileSync(path.join(expectedDir, f.path), f.text);
      }
    }
    expect(files.map((f) => f.path).sort()).toEqual(listTs(expectedDir));
    for (const f of files) expect(f.text, `${name}/expected/${f.path}`).toBe(readFileSync(path.join(expectedDir, f.path), 'utf8'));
  });

  it('prints its model as stable JSON', () => {
    const a = JSON.stringify(compileFixture(dir).ir);
    const b = JSON.stringify(compileFixture(dir).ir);
    expect(a).toBe(b);
    expect(JSON.parse(a).version).toBe(1);
  });
});

describe('schemas/gen', () => {
  it('is up to date with schemas/*.gdrpc (gdrpc gen --check) and compatible with schemas/deployed.ir.json', async () => {
    const cwd = process.cwd();
    process.chdir(repoRoot);
    try {
      expect(await runGen(['schemas', '--out', 'schemas/gen', '--check'])).toBe(0);
      // And compatible with what is deployed (evolution rules, docs/schema.md): after a deliberate
      // breaking change, refresh it with `npx gdrpc gen schemas --ir > schemas/deployed.ir.json`.
      expect(await runGen(['schemas', '--out', 'schemas/gen', '--check', '--baseline', 'schemas/deployed.ir.json'])).toBe(0);
    } finally {
      process.chdir(cwd);
    }
  });
});

// The services the test suites and benchmarks call are schemas too; their committed modules must
// match them, or a suite would run against a descriptor that its schema no longer describes.
describe.each([['test/schemas'], ['bench/schemas']])('%s/gen', (dir) => {
  it(`is up to date with ${dir}/**/*.gdrpc (gdrpc gen --check)`, async () => {
    const cwd = process.cwd();
    process.chdir(repoRoot);
    try {
      expect(await runGen([dir, '--out', `${dir}/gen`, '--check', '--quiet'])).toBe(0);
    } finally {
      process.chdir(cwd);
    }
  });
});
