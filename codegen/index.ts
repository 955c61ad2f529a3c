// Public surface of the code generator: the `gen` command and the passes it is built from.
export { runGen } from './gen.ts';
export { compile, type CompileOptions, type CompileResult } from './compile.ts';
export { emitModules, type EmitOptions, type EmittedFile } from './emit/module.ts';
export type { ImportExtension } from './emit/symbols.ts';
export { DiagnosticBag, formatDiagnostic, type Diagnostic, type SourcePos } from './diagnostics.ts';
export type { SourceHost } from './loader.ts';
export * from './model.ts';
