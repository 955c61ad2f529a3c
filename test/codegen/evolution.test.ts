// Evolution rules (docs/schema.md): a change is compared with the IR of the deployed version;
// breaking changes are errors, risky ones warnings, compatible ones silent.
import { describe, expect, it } from 'vitest';
import { compile } from '../../codegen/compile.ts';
import type { IrSchemaSet } from '../../codegen/model.ts';

function compileText(text: string, baseline?: IrSchemaSet) {
  const host = { readFile: (abs: string) => (abs === '/v/s.gdrpc' ? text : undefined) };
  return compile(['/v/s.gdrpc'], { root: '/v', host, ...(baseline ? { baseline } : {}) });
}

const BEFORE = `package evo.v1;
enum Mode { FAST = 0; SAFE = 1; }
struct Block { id: u32; note: string?; data: tensor<f16, [n, 64]> @cuda; }
service S {
  rpc put(block: Block, mode: Mode, tag: string?) -> (ok: bool);
  rpc watch(id: u32) -> stream (event: string);
}
service Old { rpc ping() -> (); }
`;

/** Messages (with severity) the change from BEFORE to `after` produces. */
function evolve(after: string): string[] {
  const base = compileText(BEFORE);
  expect(base.diags.items).toEqual([]);
  const next = compileText(after, base.ir);
  return next.diags.sorted().map((d) => `${d.severity}: ${d.message}`);
}

const change = (from: string, to: string): string => {
  expect(BEFORE).toContain(from);
  return BEFORE.replace(from, to);
};

describe('compatible changes are accepted', () => {
  it.each([
    ['nothing', BEFORE],
    ['an optional argument added', change('tag: string?)', 'tag: string?, priority: u32?)')],
    ['an optional result added', change('-> (ok: bool)', '-> (ok: bool, why: string?)')],
    ['an optional struct field added', change('note: string?;', 'note: string?; origin: string?;')],
    ['an optional field removed', change('note: string?; ', '')],
    ['an optional argument removed', change(', tag: string?', '')],
    ['fields reordered', change('id: u32; note: string?;', 'note: string?; id: u32;')],
    ['a method added', change('service Old {', 'service Old {\n  rpc pong() -> ();')],
    ['a service added', `${BEFORE}\nservice New { rpc hi() -> (); }\n`],
    ['a tensor moved from @cuda to @host', change('@cuda;', '@host;')],
  ])('%s', (_, after) => {
    expect(evolve(after)).toEqual([]);
  });
});

describe('breaking changes are errors', () => {
  it.each([
    ['a required argument added', change('tag: string?)', 'tag: string?, priority: u32)'), "error: new field 'priority' of arguments of put is required"],
    ['a required struct field removed', change('id: u32; ', ''), "error: required field 'id' was removed from struct Block"],
    ['a scalar type changed', change('id: u32;', 'id: u64;'), "error: field 'id' of struct Block changed type (u32 -> u64)"],
    ['a dtype changed', change('tensor<f16', 'tensor<bf16'), 'changed type (dtype f16 -> bf16)'],
    ['a rank changed', change('[n, 64]', '[n, 64, 2]'), 'changed type (rank 2 -> 3)'],
    ['a fixed size changed', change('[n, 64]', '[n, 128]'), 'changed type (shape)'],
    ['a tensor made remote', change('@cuda;', '@remote;'), 'changed type (placement @cuda -> @remote)'],
    ['an optional made required', change('tag: string?', 'tag: string'), "error: field 'tag' of arguments of put changed between optional and required"],
    ['a method removed', change('  rpc watch(id: u32) -> stream (event: string);\n', ''), "error: method 'S.watch' was removed"],
    ['a service removed', change('service Old { rpc ping() -> (); }\n', ''), "error: service 'evo.v1.Old' was removed"],
    ['unary made streaming', change('-> (ok: bool)', '-> stream (ok: bool)'), "error: method 'put' changed between streaming and unary"],
    ['an enum value removed', change(' SAFE = 1;', ''), "error: enum value 'Mode.SAFE' was removed"],
    ['an enum value renumbered', change('SAFE = 1', 'SAFE = 2'), "error: enum value 'SAFE' changed number from 1 to 2"],
  ])('%s', (_, after, message) => {
    const diags = evolve(after);
    expect(diags.some((d) => d.startsWith('error: ') && d.includes(message)), diags.join('\n')).toBe(true);
  });
});

describe('risky changes are warnings', () => {
  it('an enum value added warns that deployed peers reject it', () => {
    const diags = evolve(change('SAFE = 1;', 'SAFE = 1; FASTEST = 2;'));
    expect(diags).toEqual([expect.stringMatching(/^warning: new enum value 'Mode\.FASTEST': deployed peers reject it/)]);
  });
});
