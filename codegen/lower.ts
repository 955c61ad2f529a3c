// Lowers syntax trees to the model: resolves type names through the scope, turns written types
// into descriptor TypeRefs and reports what is wrong with a type (unknown names, placement on a
// non-tensor, bad dtypes, non-string map keys, sizes given to a dimension name twice).
import type { DType, Dim, Placement, ScalarName, TypeRef } from '../core/schema/descriptor.ts';
import type { FieldNode, PlacementNode, TypeNode } from './ast.ts';
import type { DiagnosticBag, SourcePos } from './diagnostics.ts';
import type { LoadedFile } from './loader.ts';
import { IR_VERSION, type IrField, type IrFile, type IrSchemaSet } from './model.ts';
import { packageOf, type Scope } from './scope.ts';
import { DTYPES, SCALARS } from './builtins.ts';

/** Where each model object came from, for passes that report against the model. */
export type PositionTable = WeakMap<object, SourcePos>;

/** Builds the model of all loaded files (in load order). */
export function lower(files: LoadedFile[], scope: Scope, diags: DiagnosticBag): { ir: IrSchemaSet; positions: PositionTable } {
  const positions: PositionTable = new WeakMap();
  const ir: IrSchemaSet = { version: IR_VERSION, files: files.map((f) => new FileLowering(f, scope, diags, positions).run()) };
  return { ir, positions };
}

class FileLowering {
  /** Sizes given to dimension names in this file (`heads = 16`); a bare `heads` then means 16. */
  private readonly sizedDims = new Map<string, { size: number; pos: SourcePos }>();

  constructor(
    private readonly file: LoadedFile,
    private readonly scope: Scope,
    private readonly diags: DiagnosticBag,
    private readonly positions: PositionTable,
  ) {}

  run(): IrFile {
    const { ast } = this.file;
    const pkg = packageOf(this.file);
    const full = (name: string): string => (pkg ? `${pkg}.${name}` : name);
    this.collectSizedDims();
    const out: IrFile = {
      path: this.file.rel,
      package: pkg,
      imports: this.file.imports.map((f) => f.rel),
      doc: ast.doc,
      structs: [],
      enums: [],
      services: [],
    };
    for (const decl of ast.decls) {
      const name = decl.name.text;
      if (decl.kind === 'struct') {
        out.structs.push(this.at({ name, fullName: full(name), fields: decl.fields.map((f) => this.field(f)), doc: decl.doc }, decl.name.pos));
      } else if (decl.kind === 'enum') {
        const values = decl.values.map((v) => this.at({ name: v.name.text, value: v.value, doc: v.doc }, v.name.pos));
        out.enums.push(this.at({ name, fullName: full(name), values, doc: decl.doc }, decl.name.pos));
      } else {
        const methods = decl.methods.map((m) =>
          this.at(
            {
              name: m.name.text,
              args: m.args.map((f) => this.field(f)),
              results: m.results.map((f) => this.field(f)),
              clientStreaming: m.clientStreaming,
              serverStreaming: m.serverStreaming,
              doc: m.doc,
            },
            m.name.pos,
          ),
        );
        out.services.push(this.at({ name, fullName: full(name), methods, doc: decl.doc }, decl.name.pos));
      }
    }
    return this.at(out, ast.package?.pos ?? { file: this.file.display, line: 1, col: 1, offset: 0 });
  }

  private at<T extends object>(value: T, pos: SourcePos): T {
    this.positions.set(value, pos);
    return value;
  }

  private field(node: FieldNode): IrField {
    return this.at({ name: node.name.text, type: this.type(node.type), doc: node.doc }, node.name.pos);
  }

  private type(node: TypeNode): TypeRef {
    if (node.placement && !isTensorNode(node)) {
      this.diags.error(node.placement.pos, `placement '@${node.placement.kind}' on a non-tensor type (only tensors have a placement)`);
    }
    switch (node.kind) {
      case 'named':
        return this.named(node.name, node.pos);
      case 'list':
        return { kind: 'list', element: this.type(node.element) };
      case 'map':
        if (!(node.key.kind === 'named' && node.key.name === 'string')) {
          this.diags.error(node.key.pos, 'map keys must be string');
        } else if (node.key.placement !== undefined) {
          this.diags.error(node.key.pos, 'a map key has no placement (only tensors have one)');
        }
        return { kind: 'map', value: this.type(node.value) };
      case 'optional': {
        if (node.inner.kind === 'optional') this.diags.error(node.pos, "a type can be optional only once ('T?')");
        // `tensor<…>? @cuda` places the tensor inside the optional.
        const inner = node.placement && node.inner.kind === 'tensor' ? { ...node.inner, placement: node.placement } : node.inner;
        return { kind: 'optional', inner: this.type(inner) };
      }
      case 'tensor':
        return this.tensor(node);
    }
  }

  private named(name: string, pos: SourcePos): TypeRef {
    if (SCALARS.has(name)) return { kind: 'scalar', name: name as ScalarName };
    if (name === 'tensor' || name === 'list' || name === 'map') {
      this.diags.error(pos, `'${name}' needs type arguments: ${name === 'tensor' ? 'tensor<dtype, [dims]>' : name === 'list' ? 'list<T>' : 'map<string, T>'}`);
      return { kind: 'scalar', name: 'bytes' };
    }
    const sym = this.scope.resolve(this.file, name, pos);
    if (!sym) return { kind: 'scalar', name: 'bytes' };
    if (sym.kind === 'service') {
      this.diags.error(pos, `'${name}' is a service, not a type`);
      return { kind: 'scalar', name: 'bytes' };
    }
    return { kind: sym.kind, name: sym.fullName };
  }

  private tensor(node: Extract<TypeNode, { kind: 'tensor' }>): TypeRef {
    const dtype = node.dtype.text;
    if (!DTYPES.has(dtype)) {
      this.diags.error(node.dtype.pos, `unknown tensor dtype '${dtype}' (expected one of ${[...DTYPES].join(', ')})`);
    }
    const shape: Dim[] = node.dims.map((d) => {
      if (d.kind === 'any') return { kind: 'any' };
      if (d.kind === 'fixed') return { kind: 'fixed', size: d.size };
      const sized = this.sizedDims.get(d.name);
      return sized ? { kind: 'fixed', size: sized.size } : { kind: 'symbol', name: d.name };
    });
    return { kind: 'tensor', dtype: dtype as DType, shape, placement: placement(node.placement) };
  }

  /** Records `name = N` dimensions of the file; a name sized twice must get the same size. */
  private collectSizedDims(): void {
    forEachTensor(this.file.ast, (t) => {
      for (const d of t.dims) {
        if (d.kind !== 'fixed' || d.name === undefined) continue;
        const previous = this.sizedDims.get(d.name);
        if (previous && previous.size !== d.size) {
          this.diags.error(d.pos, `dimension '${d.name}' is ${d.size} here but ${previous.size} at line ${previous.pos.line}`);
        } else if (!previous) {
          this.sizedDims.set(d.name, { size: d.size, pos: d.pos });
        }
      }
    });
  }
}

function isTensorNode(node: TypeNode): boolean {
  return node.kind === 'tensor' || (node.kind === 'optional' && node.inner.kind === 'tensor');
}

function placement(node: PlacementNode | undefined): Placement {
  if (!node) return { kind: 'host' };
  if (node.kind === 'cuda') return node.device === undefined ? { kind: 'cuda' } : { kind: 'cuda', device: node.device };
  return { kind: node.kind };
}

/** Calls `visit` for every tensor type written anywhere in a file. */
export function forEachTensor(ast: LoadedFile['ast'], visit: (t: Extract<TypeNode, { kind: 'tensor' }>) => void): void {
  const walk = (t: TypeNode): void => {
    if (t.kind === 'tensor') visit(t);
    else if (t.kind === 'list') walk(t.element);
    else if (t.kind === 'map') walk(t.value);
    else if (t.kind === 'optional') walk(t.inner);
  };
  for (const decl of ast.decls) {
    if (decl.kind === 'struct') decl.fields.forEach((f) => walk(f.type));
    if (decl.kind === 'service') for (const m of decl.methods) [...m.args, ...m.results].forEach((f) => walk(f.type));
  }
}
