// docs/wire.md against the frame table (core/wire/frames.ts): every frame and field the document
// lists is in the table and the other way round, with the same wire type and optionality, and
// the tensor descriptor's fields belong to the same movers. The table is what the code checks,
// so when this fails it is usually the document that has to change.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { FRAMES, MOVER_FIELDS, TENSOR_FIELDS, WIRE_VERSION, type FrameSpec } from '../../core/wire/frames.ts';
import { WIRE_TYPE_NAMES, type Fields } from '../../core/wire/schema.ts';

const doc = readFileSync(new URL('../../docs/wire.md', import.meta.url), 'utf8');

/** The rows of the markdown table that follows `heading`, as trimmed cells (header and rule dropped). */
function tableAfter(heading: string): string[][] {
  const start = doc.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/wire.md has no heading '${heading}'`);
  const lines = doc.slice(start).split('\n');
  const first = lines.findIndex((line) => line.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first)) {
    if (!line.startsWith('|')) break;
    rows.push(line.slice(1, -1).split(' | ').map((cell) => cell.trim()));
  }
  return rows.slice(2);
}

/** "name type" as the document writes a field: its type with a `?` when optional. */
const written = (fields: Fields): Record<string, string> =>
  Object.fromEntries(Object.entries(fields).map(([name, spec]) => [name, `${WIRE_TYPE_NAMES[spec.type]}${spec.optional ? '?' : ''}`]));

/** The fields of a frame's body cell: "`key` uint64 (why), `chal` bin? (...)" -> { key: 'uint64', chal: 'bin?' }. */
function bodyFields(cell: string): Record<string, string> {
  if (cell === '(nothing)') return {};
  // Remarks in parentheses may name values in backticks too: they are not fields.
  const bare = cell.replace(/ \([^)]*\)/g, '');
  const fields: Record<string, string> = {};
  for (const part of bare.split(/, (?=`)/)) {
    const match = /^`(\w+)` (\S+)$/.exec(part.trim());
    if (match === null) throw new Error(`cannot read the field '${part}' in '${cell}'`);
    fields[match[1]!] = match[2]!;
  }
  return fields;
}

describe('docs/wire.md "Control frames"', () => {
  const rows = tableAfter('## Control frames');
  const documented = rows.filter((row) => !row[1]!.startsWith('('));

  it('speaks the version the code speaks', () => {
    expect(doc).toMatch(new RegExp(`^# gdrpc wire format, version ${WIRE_VERSION}\\n`));
    expect(doc).toContain(`Every body has \`v: ${WIRE_VERSION}\``);
  });

  it('lists every frame kind of the table, under the same name, and no other', () => {
    const table = Object.entries(FRAMES as Record<number, FrameSpec>).map(([kind, spec]) => [Number(kind), spec.name]);
    expect(documented.map((row) => [Number(row[0]), row[1]])).toEqual(table);
    // A reserved kind stays reserved: the code does not decode it.
    for (const row of rows.filter((r) => r[1]!.startsWith('('))) expect(Object.hasOwn(FRAMES, Number(row[0]))).toBe(false);
  });

  it.each(documented.map((row) => [row[1]!, Number(row[0]), row[3]!] as const))('%s has the fields, types and optionality of the table', (_name, kind, cell) => {
    expect(bodyFields(cell)).toEqual(written((FRAMES as Record<number, FrameSpec>)[kind]!.fields));
  });
});

describe('docs/wire.md "Tensor descriptors"', () => {
  const rows = tableAfter('### Tensor descriptors');
  const byKey = new Map(rows.map((row) => [row[0]!.replace(/`/g, ''), { type: row[1]!, meaning: row[2]! }]));
  /** The movers a row's meaning ties the field to ("`m = t`/`r`: ..."); none for common fields. */
  const moversOf = (meaning: string): string[] =>
    [...meaning.matchAll(/`m = (\w)`((?:\/`\w`)*)/g)].flatMap((m) => [m[1]!, ...[...m[2]!.matchAll(/`(\w)`/g)].map((x) => x[1]!)]);

  it('lists the fields of the table, with their types and optionality', () => {
    const table: Record<string, string> = written(TENSOR_FIELDS);
    for (const fields of Object.values(MOVER_FIELDS)) Object.assign(table, written(fields));
    expect(Object.fromEntries([...byKey].map(([key, row]) => [key, row.type]))).toEqual(table);
  });

  it('ties each field to the movers that carry it', () => {
    for (const key of Object.keys(TENSOR_FIELDS)) expect(moversOf(byKey.get(key)!.meaning), key).toEqual([]);
    const carriers = new Map<string, string[]>();
    for (const [mover, fields] of Object.entries(MOVER_FIELDS)) for (const key of Object.keys(fields)) carriers.set(key, [...(carriers.get(key) ?? []), mover]);
    for (const [key, movers] of carriers) expect(moversOf(byKey.get(key)!.meaning).sort(), key).toEqual([...movers].sort());
  });

  it('names the movers the table accepts', () => {
    const named = [...byKey.get('m')!.meaning.matchAll(/`(\w)` /g)].map((m) => m[1]);
    expect(named).toEqual(TENSOR_FIELDS.m.oneOf);
  });
});
