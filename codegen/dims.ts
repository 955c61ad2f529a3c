// Dimension names bind once per call. Within a file `heads = 16` gives a name a size (checked in
// lower.ts); this pass follows each method through the structs it reaches, across files, and
// reports a name that one call would need to be two different sizes.
import type { TypeNode } from './ast.ts';
import type { DiagnosticBag } from './diagnostics.ts';
import type { LoadedFile } from './loader.ts';
import { forEachTensor } from './lower.ts';
import type { Scope } from './scope.ts';

interface SizedUse {
  size: number;
  where: string;
}

/** Reports dimension names that get different sizes within one method's arguments and results. */
export function checkCallDims(files: LoadedFile[], scope: Scope, diags: DiagnosticBag): void {
  const sizesByFile = new Map<LoadedFile, Map<string, number>>();
  const sizesOf = (file: LoadedFile): Map<string, number> => {
    let sizes = sizesByFile.get(file);
    if (!sizes) {
      const found = new Map<string, number>();
      forEachTensor(file.ast, (t) => t.dims.forEach((d) => d.kind === 'fixed' && d.name !== undefined && !found.has(d.name) && found.set(d.name, d.size)));
      sizes = found;
      sizesByFile.set(file, sizes);
    }
    return sizes;
  };

  for (const file of files) {
    for (const decl of file.ast.decls) {
      if (decl.kind !== 'service') continue;
      for (const method of decl.methods) {
        const uses = new Map<string, SizedUse>();
        const visited = new Set<string>();
        const walk = (t: TypeNode, owner: LoadedFile, where: string): void => {
          if (t.kind === 'list') walk(t.element, owner, where);
          else if (t.kind === 'map') walk(t.value, owner, where);
          else if (t.kind === 'optional') walk(t.inner, owner, where);
          else if (t.kind === 'named') {
            const sym = scope.resolve(owner, t.name, t.pos, true);
            if (sym?.node.kind !== 'struct' || visited.has(sym.fullName)) return;
            visited.add(sym.fullName);
            for (const f of sym.node.fields) walk(f.type, sym.file, `${sym.name}.${f.name.text}`);
          } else if (t.kind === 'tensor') {
            for (const d of t.dims) {
              const name = d.kind === 'symbol' || d.kind === 'fixed' ? d.name : undefined;
              if (name === undefined) continue;
              const size = d.kind === 'fixed' ? d.size : sizesOf(owner).get(name);
              if (size === undefined) continue;
              // A bare name sized elsewhere in its file says so, or the message would puzzle.
              const at = d.kind === 'fixed' ? where : `${where}, sized in ${owner.rel}`;
              const previous = uses.get(name);
              if (previous && previous.size !== size) {
                diags.error(method.name.pos, `dimension '${name}' must be ${previous.size} (${previous.where}) and ${size} (${at}) in the same call`);
              } else if (!previous) {
                uses.set(name, { size, where: at });
              }
            }
          }
        };
        for (const f of method.args) walk(f.type, file, f.name.text);
        for (const f of method.results) walk(f.type, file, `result ${f.name.text}`);
      }
    }
  }
}
