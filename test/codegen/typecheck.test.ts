// The generated modules (schemas/gen and every fixture's expected output) and the type-level
// tests in types/ are compiled by tsc with test/codegen/tsconfig.json. types/generated-api.ts is
// full of `@ts-expect-error` lines: tsc fails on any of them that compiles, so a wrong argument
// type that type-checks breaks this test.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { here, repoRoot } from './fixture-files.ts';

const run = promisify(execFile);
const tsc = path.join(repoRoot, 'node_modules/typescript/bin/tsc');
const project = path.join(here, 'tsconfig.json');

async function tscOutput(...args: string[]): Promise<string> {
  try {
    const { stdout } = await run(process.execPath, [tsc, '-p', project, ...args], { cwd: repoRoot, maxBuffer: 64 << 20 });
    return stdout;
  } catch (e) {
    return (e as { stdout?: string }).stdout ?? String(e);
  }
}

describe('generated code type-checks', () => {
  it('includes the generated modules and the type-level tests', async () => {
    const files = (await tscOutput('--listFilesOnly')).split('\n').map((f) => path.relative(repoRoot, f.trim()));
    expect(files).toContain('schemas/gen/echo.ts');
    expect(files).toContain('schemas/gen/kv_transfer.ts');
    expect(files).toContain('test/codegen/fixtures/imports/expected/pipeline.ts');
    expect(files).toContain('test/codegen/types/generated-api.ts');
  });

  it('has no type errors, and every @ts-expect-error line fails to compile', async () => {
    const out = await tscOutput('--noEmit', '--pretty', 'false');
    // Errors inside other areas' files are theirs; ours are the generated code and the type tests.
    const ours = out.split('\n').filter((l) => /^(schemas\/gen|test\/codegen)\//.test(l) || /^error TS/.test(l));
    expect(ours).toEqual([]);
  });
});
