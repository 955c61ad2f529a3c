// Negative fixtures: each folder under errors/ holds schemas that must not compile and the exact
// diagnostics (expected.txt) the compiler prints for them, all errors of a file in one run.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DiagnosticBag, formatDiagnostic } from '../../codegen/diagnostics.ts';
import { parse } from '../../codegen/parser.ts';
import { compileFixture, errorsDir, folders, updateGolden } from './fixture-files.ts';

describe.each(folders(errorsDir))('negative fixture %s', (name) => {
  it('reports exactly the expected diagnostics', () => {
    const result = compileFixture(path.join(errorsDir, name));
    expect(result.diags.hasErrors).toBe(true);
    const text = result.diags.format(result.sources) + '\n';
    const expectedFile = path.join(errorsDir, name, 'expected.txt');
    if (updateGolden) writeFileSync(expectedFile, text);
    expect(text).toBe(readFileSync(expectedFile, 'utf8'));
  });
});

describe('diagnostic format', () => {
  it('is file:line:col: error: message, the source line, and a caret under the column', () => {
    const src = 'package p;\n\nstruct A {\n\tx: Nope;\n}\n';
    const diags = new DiagnosticBag();
    parse('dir/a.gdrpc', src, diags);
    diags.error({ file: 'dir/a.gdrpc', line: 4, col: 5, offset: 28 }, "unknown type 'Nope'");
    expect(diags.format(new Map([['dir/a.gdrpc', src]]))).toBe("dir/a.gdrpc:4:5: error: unknown type 'Nope'\n  \tx: Nope;\n  \t   ^");
  });

  it('keeps parsing after a syntax error and reports later ones in the same file', () => {
    const src = 'package p;\nstruct A { x u32; y: bool; }\nstruct B { z: ; }\nservice S { rpc m() -> (); rpc n( -> (); }\n';
    const diags = new DiagnosticBag();
    const file = parse('a.gdrpc', src, diags);
    expect(diags.items.map((d) => `${d.pos.line}:${d.pos.col}`)).toEqual(['2:14', '3:15', '4:35']);
    // What could be read survives: both structs, y in A, and the good method.
    expect(file.decls.map((d) => d.name.text)).toEqual(['A', 'B', 'S']);
    const a = file.decls[0]!;
    expect(a.kind === 'struct' && a.fields.map((f) => f.name.text)).toEqual(['y']);
  });

  it('prints the header alone when the source is unknown', () => {
    const d = { severity: 'warning' as const, pos: { file: 'x.gdrpc', line: 1, col: 2, offset: 1 }, message: 'm' };
    expect(formatDiagnostic(d, undefined)).toBe('x.gdrpc:1:2: warning: m');
  });
});
