// `gdrpc gen`: compiles schema files and writes (or, with --check, compares) one TypeScript module
// per schema file. The emitter is loaded only to emit: it needs ts-morph, an optional peer
// dependency, so --help and --ir work without it and its absence is explained, not thrown.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ExitCode, parseCommandLine, usageError } from '../core/cli/command-line.ts';
import { Code, GdrpcError } from '../core/errors.ts';
import { isRecord } from '../core/tensor/options.ts';
import { compile } from './compile.ts';
import type { EmittedFile } from './emit/module.ts';
import { outputPath } from './emit/symbols.ts';
import { IR_VERSION, type IrFile, type IrSchemaSet } from './model.ts';
import { checkOutput, writeOutput, type WriteResult } from './output.ts';
import { commonRoot, findSchemas } from './schema-files.ts';

const command = {
  name: 'gen',
  usage: `usage: gdrpc gen <files or dirs> --out <dir> [options]

Compiles .gdrpc schema files (directories are searched for them) and writes one TypeScript
module per schema file, at the same relative path under --out.

options:
  -o, --out <dir>               where generated modules go (paths mirror the schema files)
      --check                   write nothing; exit 1 when the output in --out is missing, stale,
                                or left over from a schema file that no longer exists
      --ir                      print the model (IR) as JSON on stdout instead of generating code
      --baseline <file>         an IR saved earlier with --ir: report changes that break deployed peers
      --import-extension js|ts  extension of imports between generated modules (default js, which
                                plain tsc resolves; ts needs allowImportingTsExtensions)
  -q, --quiet                   print nothing on success
  -h, --help                    this text

exit status: 0 generated (or up to date, with --check); 1 --check found output out of date, or
ts-morph is not installed; 2 usage error or schema errors (nothing is written then).`,
  options: {
    out: { type: 'string', short: 'o' },
    check: { type: 'boolean' },
    ir: { type: 'boolean' },
    baseline: { type: 'string' },
    'import-extension': { type: 'string' },
    quiet: { type: 'boolean', short: 'q' },
  },
  positionals: true,
} as const;

/** Runs the gen command; returns the exit code (0 ok, 1 stale output with --check, 2 errors). */
export async function runGen(argv: string[]): Promise<number> {
  const args = parseCommandLine(command, argv);
  if (typeof args === 'number') return args;
  const { values, positionals } = args;
  if (positionals.length === 0) return usageError(command, 'no schema files or directories given');
  if (!values.ir && values.out === undefined) return usageError(command, '--out <dir> is required');
  const importExtension = values['import-extension'] ?? 'js';
  if (importExtension !== 'js' && importExtension !== 'ts') {
    return usageError(command, `--import-extension is js or ts, not '${importExtension}'`);
  }

  const outDir = values.out === undefined ? undefined : path.resolve(values.out);
  const inputs = positionals.map((p) => path.resolve(p));
  const entries = findSchemas(inputs, outDir);
  if (typeof entries === 'string') {
    process.stderr.write(`gdrpc gen: ${entries}\n`);
    return ExitCode.USAGE;
  }
  let baseline: IrSchemaSet | undefined;
  if (values.baseline !== undefined) {
    try {
      const parsed: unknown = JSON.parse(readFileSync(values.baseline, 'utf8'));
      const wrong = baselineFault(parsed);
      if (wrong !== undefined) throw new Error(wrong);
      baseline = parsed as IrSchemaSet;
    } catch (e) {
      process.stderr.write(`gdrpc gen: cannot read baseline ${values.baseline}: ${(e as Error).message}\n`);
      return ExitCode.USAGE;
    }
  }
  const root = commonRoot(inputs);
  const result = compile(entries, { root, baseline });
  if (result.diags.items.length > 0) process.stderr.write(result.diags.format(result.sources) + '\n');
  if (result.diags.hasErrors) {
    const n = result.diags.items.filter((d) => d.severity === 'error').length;
    process.stderr.write(`gdrpc gen: ${n} error${n === 1 ? '' : 's'}; nothing generated\n`);
    return ExitCode.USAGE;
  }
  if (values.ir) {
    process.stdout.write(JSON.stringify(result.ir, null, 2) + '\n');
    return ExitCode.OK;
  }
  // Two inputs whose modules would be one file (`x` and `x.gdrpc`): the second overwrote the first.
  const byOutput = new Map<string, string>();
  for (const file of result.ir.files) {
    const module = outputPath(file.path);
    const other = byOutput.get(module);
    if (other !== undefined) {
      process.stderr.write(`gdrpc gen: ${file.path} and ${other} would both be written to ${module}; rename one of them\n`);
      return ExitCode.USAGE;
    }
    byOutput.set(module, file.path);
  }

  const { emitModules } = await loadEmitter();
  // Each module names its schema file from where the module is: whichever inputs a later run
  // has, it tells a module whose schema is gone from one it did not generate this time.
  const schemaLocation = (file: IrFile): string =>
    path.relative(path.dirname(path.join(outDir!, outputPath(file.path))), path.join(root, file.path)).split(path.sep).join('/');
  const files = emitModules(result.ir, { importExtension, schemaLocation });
  const say = values.quiet ? () => {} : (line: string) => process.stdout.write(`${line}\n`);
  if (values.check) {
    const code = checkOutput(files, outDir!);
    if (code === ExitCode.OK) say(`${contents(files, result.ir)} in ${shown(outDir!)} ${files.length === 1 ? 'is' : 'are'} up to date`);
    return code;
  }
  let written: WriteResult;
  try {
    written = writeOutput(files, outDir!);
  } catch (error) {
    // --out names a file, a module's path is a directory, no permission: said as it is.
    process.stderr.write(`gdrpc gen: cannot write to ${shown(outDir!)}: ${(error as Error).message}\n`);
    return ExitCode.FAILURE;
  }
  report(written, contents(files, result.ir), outDir!, say);
  return ExitCode.OK;
}

/** The emitter, whose ts-morph import fails with ERR_MODULE_NOT_FOUND where ts-morph is not installed. */
async function loadEmitter(): Promise<typeof import('./emit/module.ts')> {
  try {
    return await import('./emit/module.ts');
  } catch (error) {
    const e = error as { code?: unknown; message?: unknown };
    if (e.code === 'ERR_MODULE_NOT_FOUND' && String(e.message).includes("'ts-morph'")) {
      throw new GdrpcError(Code.FAILED_PRECONDITION,
        'writing TypeScript needs the ts-morph package, which is not installed: npm install --save-dev ts-morph',
        { cause: error });
    }
    throw error;
  }
}

/** "3 files (2 services, 9 methods)" */
function contents(files: EmittedFile[], ir: IrSchemaSet): string {
  const services = ir.files.flatMap((f) => f.services);
  const methods = services.reduce((n, s) => n + s.methods.length, 0);
  return `${count(files.length, 'file')} (${count(services.length, 'service')}, ${count(methods, 'method')})`;
}

function report(result: WriteResult, what: string, outDir: string, say: (line: string) => void): void {
  for (const f of result.written) say(`wrote ${shown(f)}`);
  for (const f of result.removed) say(`removed ${shown(f)} (its schema file is gone)`);
  const upToDate = result.unchanged.length;
  if (upToDate === 0) say(`wrote ${what} to ${shown(outDir)}`);
  else if (result.written.length === 0) say(`${what} in ${shown(outDir)} ${upToDate === 1 ? 'was' : 'were'} already up to date`);
  else say(`wrote ${result.written.length} of ${what} to ${shown(outDir)}; ${upToDate} already up to date`);
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** A path as the user would type it: relative to the working directory. */
function shown(p: string): string {
  return path.relative(process.cwd(), p) || '.';
}

/** What makes `value` no IR of `gen --ir`, or undefined: every declaration, method, field and
 *  type the evolution check reads is checked for its shape first (a damaged file crashed it, or
 *  passed with its check skipped). */
export function baselineFault(value: unknown): string | undefined {
  const saved = 'it is not an IR saved by `gdrpc gen --ir`';
  if (!isRecord(value)) return `${saved} (not a JSON object)`;
  const { version, files } = value;
  if (version !== IR_VERSION) return typeof version === 'number' ? `its IR version is ${version}; this gdrpc reads version ${IR_VERSION}` : `${saved} (no version)`;
  if (!Array.isArray(files)) return `${saved} (no files list)`;
  const wrong = firstFault(files, 'files', fileFault);
  return wrong === undefined ? undefined : `${saved} (${wrong})`;
}

type Fault = (value: unknown, at: string) => string | undefined;

/** The first fault of the list at `at`, or of its items. */
function firstFault(list: unknown, at: string, fault: Fault): string | undefined {
  if (!Array.isArray(list)) return `${at} is not a list`;
  for (const [i, item] of list.entries()) {
    const wrong = fault(item, `${at}[${i}]`);
    if (wrong !== undefined) return wrong;
  }
  return undefined;
}

/** The first of `keys` that is not a string in `value`. */
function missingString(value: Record<string, unknown>, at: string, keys: string[]): string | undefined {
  const key = keys.find((k) => typeof value[k] !== 'string');
  return key === undefined ? undefined : `${at}.${key} is not a string`;
}

const fileFault: Fault = (file, at) => {
  if (!isRecord(file)) return `${at} is not an object`;
  return missingString(file, at, ['path', 'package'])
    ?? (Array.isArray(file.imports) ? undefined : `${at}.imports is not a list`)
    ?? firstFault(file.structs, `${at}.structs`, (s, where) => !isRecord(s) ? `${where} is not an object` : missingString(s, where, ['name', 'fullName']) ?? firstFault(s.fields, `${where}.fields`, fieldFault))
    ?? firstFault(file.enums, `${at}.enums`, (e, where) => !isRecord(e) ? `${where} is not an object` : missingString(e, where, ['name', 'fullName'])
      ?? firstFault(e.values, `${where}.values`, (v, w) => (isRecord(v) && typeof v.name === 'string' && Number.isInteger(v.value) ? undefined : `${w} is not a name and a number`)))
    ?? firstFault(file.services, `${at}.services`, (s, where) => !isRecord(s) ? `${where} is not an object` : missingString(s, where, ['name', 'fullName'])
      ?? firstFault(s.methods, `${where}.methods`, methodFault));
};

const methodFault: Fault = (m, at) => {
  if (!isRecord(m)) return `${at} is not an object`;
  return missingString(m, at, ['name'])
    ?? (typeof m.clientStreaming === 'boolean' && typeof m.serverStreaming === 'boolean' ? undefined : `${at} does not say whether it streams`)
    ?? firstFault(m.args, `${at}.args`, fieldFault)
    ?? firstFault(m.results, `${at}.results`, fieldFault);
};

const fieldFault: Fault = (f, at) => (!isRecord(f) ? `${at} is not an object` : missingString(f, at, ['name']) ?? typeFault(f.type, `${at}.type`));

/** A TypeRef's shape, as far as the evolution check compares it. */
function typeFault(t: unknown, at: string): string | undefined {
  if (!isRecord(t) || typeof t.kind !== 'string') return `${at} is not a type`;
  switch (t.kind) {
    case 'scalar': case 'struct': case 'enum': return missingString(t, at, ['name']);
    case 'list': return typeFault(t.element, `${at}.element`);
    case 'map': return typeFault(t.value, `${at}.value`);
    case 'optional': return typeFault(t.inner, `${at}.inner`);
    case 'tensor': return typeof t.dtype === 'string' && Array.isArray(t.shape) && isRecord(t.placement) ? undefined : `${at} is not a tensor type`;
    default: return `${at}.kind ${JSON.stringify(t.kind).slice(0, 40)} is not a kind of type`;
  }
}
