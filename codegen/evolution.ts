// Schema evolution: compares the model with a baseline (the IR of what is deployed, saved with
// `gdrpc gen --ir`) and reports changes that would make a call between an old and a new peer
// fail. Messages are maps keyed by field name, so order never matters; see docs/schema.md.
import type { TypeRef } from '../core/schema/descriptor.ts';
import type { DiagnosticBag, SourcePos } from './diagnostics.ts';
import type { PositionTable } from './lower.ts';
import type { IrEnum, IrField, IrFile, IrSchemaSet, IrService } from './model.ts';

/** Reports breaking changes from `baseline` to `current` (errors) and risky ones (warnings). */
export function checkEvolution(baseline: IrSchemaSet, current: IrSchemaSet, positions: PositionTable, diags: DiagnosticBag): void {
  const fallback = (pkg: string): SourcePos => {
    const file = current.files.find((f) => f.package === pkg) ?? current.files[0];
    return (file && positions.get(file)) ?? { file: '<schemas>', line: 1, col: 1, offset: 0 };
  };
  const collect = <T extends { fullName: string }>(set: IrSchemaSet, pick: (f: IrFile) => T[]) =>
    new Map(set.files.flatMap((f) => pick(f).map((d) => [d.fullName, { decl: d, pkg: f.package }] as const)));

  const newServices = collect(current, (f) => f.services);
  for (const [name, { decl: old, pkg }] of collect(baseline, (f) => f.services)) {
    const now = newServices.get(name);
    if (!now) diags.error(fallback(pkg), `service '${name}' was removed: deployed clients still call it`);
    else compareService(old, now.decl, positions, diags);
  }
  const newStructs = collect(current, (f) => f.structs);
  for (const [name, { decl: old }] of collect(baseline, (f) => f.structs)) {
    const now = newStructs.get(name);
    if (now) compareFields(old.fields, now.decl.fields, `struct ${old.name}`, positions.get(now.decl)!, positions, diags);
  }
  const newEnums = collect(current, (f) => f.enums);
  for (const [name, { decl: old }] of collect(baseline, (f) => f.enums)) {
    const now = newEnums.get(name);
    if (now) compareEnum(old, now.decl, positions, diags);
  }
}

function compareService(old: IrService, now: IrService, positions: PositionTable, diags: DiagnosticBag): void {
  const at = positions.get(now)!;
  for (const m of old.methods) {
    const n = now.methods.find((x) => x.name === m.name);
    if (!n) {
      diags.error(at, `method '${old.name}.${m.name}' was removed: deployed clients still call it`);
      continue;
    }
    const mAt = positions.get(n)!;
    if (m.clientStreaming !== n.clientStreaming || m.serverStreaming !== n.serverStreaming) {
      diags.error(mAt, `method '${m.name}' changed between streaming and unary: deployed peers speak the old call shape`);
    }
    compareFields(m.args, n.args, `arguments of ${m.name}`, mAt, positions, diags);
    compareFields(m.results, n.results, `results of ${m.name}`, mAt, positions, diags);
  }
}

/**
 * Fields are matched by name. Adding or removing an optional field is safe in both directions; a
 * required field may be neither added (old senders omit it) nor removed (old receivers demand it).
 */
function compareFields(
  old: IrField[], now: IrField[], where: string, at: SourcePos, positions: PositionTable, diags: DiagnosticBag,
): void {
  for (const o of old) {
    const n = now.find((f) => f.name === o.name);
    if (!n) {
      if (o.type.kind !== 'optional') diags.error(at, `required field '${o.name}' was removed from ${where}: deployed receivers still require it (make it optional first, then remove it)`);
      continue;
    }
    const nAt = positions.get(n) ?? at;
    if ((o.type.kind === 'optional') !== (n.type.kind === 'optional')) {
      diags.error(nAt, `field '${o.name}' of ${where} changed between optional and required: deployed peers disagree on whether it may be missing`);
    } else {
      const change = typeChange(o.type, n.type);
      if (change) diags.error(nAt, `field '${o.name}' of ${where} changed type (${change}): deployed peers still send or expect the old one`);
    }
  }
  for (const n of now) {
    if (!old.some((o) => o.name === n.name) && n.type.kind !== 'optional') {
      diags.error(positions.get(n) ?? at, `new field '${n.name}' of ${where} is required: deployed peers do not send it (make it optional: '${n.name}: T?')`);
    }
  }
}

function compareEnum(old: IrEnum, now: IrEnum, positions: PositionTable, diags: DiagnosticBag): void {
  const at = positions.get(now)!;
  for (const v of old.values) {
    const n = now.values.find((x) => x.name === v.name);
    if (!n) diags.error(at, `enum value '${old.name}.${v.name}' was removed: deployed peers still send ${v.value}`);
    else if (n.value !== v.value) diags.error(positions.get(n) ?? at, `enum value '${v.name}' changed number from ${v.value} to ${n.value}: the wire carries the number`);
  }
  for (const n of now.values) {
    if (!old.values.some((v) => v.name === n.name)) {
      diags.warning(positions.get(n) ?? at, `new enum value '${now.name}.${n.name}': deployed peers reject it when they receive it; send it only once every peer is upgraded`);
    }
  }
}

/** Describes how two types differ on the wire, or undefined when they are compatible. Moving a
 * tensor between @host and @cuda only changes where the receiver puts it; @remote changes the
 * transfer protocol. */
function typeChange(a: TypeRef, b: TypeRef): string | undefined {
  if (a.kind !== b.kind) return `${describe(a)} -> ${describe(b)}`;
  switch (a.kind) {
    case 'scalar':
    case 'struct':
    case 'enum':
      return a.name === (b as typeof a).name ? undefined : `${describe(a)} -> ${describe(b)}`;
    case 'list':
      return typeChange(a.element, (b as typeof a).element);
    case 'map':
      return typeChange(a.value, (b as typeof a).value);
    case 'optional':
      return typeChange(a.inner, (b as typeof a).inner);
    case 'tensor': {
      const t = b as typeof a;
      if (a.dtype !== t.dtype) return `dtype ${a.dtype} -> ${t.dtype}`;
      if (a.shape.length !== t.shape.length) return `rank ${a.shape.length} -> ${t.shape.length}`;
      if (JSON.stringify(a.shape) !== JSON.stringify(t.shape)) return 'shape';
      if ((a.placement.kind === 'remote') !== (t.placement.kind === 'remote')) return `placement @${a.placement.kind} -> @${t.placement.kind}`;
      return undefined;
    }
  }
}

function describe(t: TypeRef): string {
  if (t.kind === 'scalar' || t.kind === 'struct' || t.kind === 'enum') return t.name;
  return t.kind;
}
