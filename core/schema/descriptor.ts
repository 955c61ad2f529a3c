// Service descriptors: the data the code generator emits and the runtime reads. They are plain
// JSON-compatible objects so that another language's generator can produce the same thing.
// Everything a call needs is reachable from its method descriptor, types included: the runtime
// keeps no table of services, so two services of one name, or a descriptor used before any
// client of its service exists, cannot give a call the wrong (or no) struct declarations.

/** Element types a tensor can hold. */
export type DType =
  | 'bool' | 'u8' | 'i8' | 'i16' | 'u16' | 'i32' | 'u32' | 'i64' | 'u64' | 'f16' | 'bf16' | 'f32' | 'f64';

/** Scalar types of the schema language (64-bit integers are bigint in TypeScript). */
export type ScalarName =
  | 'bool' | 'i8' | 'i16' | 'i32' | 'i64' | 'u8' | 'u16' | 'u32' | 'u64' | 'f32' | 'f64' | 'string' | 'bytes';

/** One dimension of a declared tensor shape. */
export type Dim =
  | { kind: 'fixed'; size: number }
  | { kind: 'symbol'; name: string }
  | { kind: 'any' };

/** Where the receiving side wants a tensor. `remote` hands the receiver a handle to pull later. */
export type Placement =
  | { kind: 'host' }
  | { kind: 'cuda'; device?: number }
  | { kind: 'remote' };

export type TypeRef =
  | { kind: 'scalar'; name: ScalarName }
  /** `length`: exactly that many elements (descriptors gdrpc builds itself; the schema language has no such list) */
  | { kind: 'list'; element: TypeRef; length?: number }
  | { kind: 'map'; value: TypeRef }
  | { kind: 'optional'; inner: TypeRef }
  | { kind: 'struct'; name: string }
  | { kind: 'enum'; name: string }
  | { kind: 'tensor'; dtype: DType; shape: Dim[]; placement: Placement };

export interface FieldDescriptor {
  name: string;
  type: TypeRef;
}

export interface StructDescriptor {
  kind: 'struct';
  /** Fully qualified, e.g. "llm.tp.v1.Block". */
  name: string;
  fields: FieldDescriptor[];
}

export interface EnumDescriptor {
  kind: 'enum';
  name: string;
  values: Array<{ name: string; value: number }>;
}

/** Struct and enum declarations by fully qualified name. */
export type TypeTable = Record<string, StructDescriptor | EnumDescriptor>;

export interface MethodDescriptor {
  /** Method name as declared, e.g. "forward". */
  name: string;
  /** Fully qualified service name, e.g. "llm.tp.v1.ShardWorker"; the pair routes a call. */
  service: string;
  args: FieldDescriptor[];
  results: FieldDescriptor[];
  /** Arguments arrive as a stream of argument objects. */
  clientStreaming: boolean;
  /** Results leave as a stream of result objects. */
  serverStreaming: boolean;
  /**
   * Declarations of every struct and enum the fields reach. On the method rather than the service
   * because a call is given only its method; a generated module points every method at its one
   * `types` constant. Absent: the fields reach no struct or enum.
   */
  types?: TypeTable;
}

export interface ServiceDescriptor {
  /** Fully qualified, e.g. "llm.tp.v1.ShardWorker". */
  name: string;
  methods: Record<string, MethodDescriptor>;
}
