// Syntax tree of one schema file, as written: names are unresolved and every node keeps its
// position so that later passes can point at it.
import type { SourcePos } from './diagnostics.ts';

export interface NameNode {
  text: string;
  pos: SourcePos;
}

export type PlacementNode = { kind: 'host' | 'remote'; pos: SourcePos } | { kind: 'cuda'; device?: number; pos: SourcePos };

export type DimNode =
  /** `16`, or `heads = 16`: a named size that must agree wherever the name appears in a call. */
  | { kind: 'fixed'; size: number; name?: string; pos: SourcePos }
  | { kind: 'symbol'; name: string; pos: SourcePos }
  | { kind: 'any'; pos: SourcePos };

/** A type as written. `placement` is what followed it (`@cuda`); only tensors may carry one. */
export type TypeNode = (
  | { kind: 'named'; name: string }
  | { kind: 'list'; element: TypeNode }
  | { kind: 'map'; key: TypeNode; value: TypeNode }
  | { kind: 'tensor'; dtype: NameNode; dims: DimNode[] }
  | { kind: 'optional'; inner: TypeNode }
) & { pos: SourcePos; placement?: PlacementNode };

export interface FieldNode {
  name: NameNode;
  type: TypeNode;
  doc: string[];
}

export interface StructNode {
  kind: 'struct';
  name: NameNode;
  fields: FieldNode[];
  doc: string[];
}

export interface EnumValueNode {
  name: NameNode;
  value: number;
  doc: string[];
}

export interface EnumNode {
  kind: 'enum';
  name: NameNode;
  values: EnumValueNode[];
  doc: string[];
}

export interface MethodNode {
  name: NameNode;
  args: FieldNode[];
  results: FieldNode[];
  clientStreaming: boolean;
  serverStreaming: boolean;
  doc: string[];
}

export interface ServiceNode {
  kind: 'service';
  name: NameNode;
  methods: MethodNode[];
  doc: string[];
}

export type DeclNode = StructNode | EnumNode | ServiceNode;

export interface FileNode {
  /** The file name as given to the compiler (used in diagnostics). */
  file: string;
  package?: NameNode;
  imports: NameNode[];
  /** Doc comment lines before `package`. */
  doc: string[];
  decls: DeclNode[];
}
