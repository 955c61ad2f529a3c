// `gdrpc gen <files or dirs> --out <dir> [--check] [--ir] [--baseline <ir.json>]`: compiles schema
// files and writes (or, with --check, compares) one TypeScript module per schema file.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { compile } from './compile.ts';
import { emitModules } from './emit/module.ts';
import type { IrSchemaSet } from './model.ts';
import { checkOutput, writeOutput } from './output.ts';

const USAGE = `usage: gdrpc gen <files or dirs> --out <dir> [--check] [--ir] [--baseline <ir.json>]
  --out <dir>        where generated modules go (paths mirror the schema files)
  --check            write nothing; exit 1 when the output in --out is missing, stale, or
                     left over from a schema file that no longer exists
  --ir               print the model (IR) as JSON on stdout instead of generating code
  --baseline <file>  an IR saved earlier with --ir: report changes that break deployed peers`;

interface GenArgs {
  inputs: string[];
  out?: string;
  check: boolean;
  ir: boolean;
  baseline?: string;
}

/** Runs the gen command; returns the exit code (0 ok, 1 stale output with --check, 2 errors). */
export async function runGen(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`gdrpc gen: ${args}\n${USAGE}\n`);
    return 2;
  }
  const outDir = args.out === undefined ? undefined : path.resolve(args.out);
  const inputs = args.inputs.map((p) => path.resolve(p));
  const entries = findSchemas(inputs, outDir);
  if (typeof entries === 'string') {
    process.stderr.write(`gdrpc gen: ${entries}\n`);
    return 2;
  }
  let baseline: IrSchemaSet | undefined;
  if (args.baseline !== undefined) {
    try {
      baseline = JSON.parse(readFileSync(args.baseline, 'utf8')) as IrSchemaSet;
    } catch (e) {
      process.stderr.write(`gdrpc gen: cannot read baseline ${args.baseline}: ${(e as Error).message}\n`);
      return 2;
    }
  }
  const root = commonRoot(inputs);
  const result = compile(entries, { root, baseline });
  if (result.diags.items.length > 0) process.stderr.write(result.diags.format(result.sources) + '\n');
  if (result.diags.hasErrors) {
    const n = result.diags.items.filter((d) => d.severity === 'error').length;
    process.stderr.write(`gdrpc gen: ${n} error${n === 1 ? '' : 's'}; nothing generated\n`);
    return 2;
  }
  if (args.ir) {
    process.stdout.write(JSON.stringify(result.ir, null, 2) + '\n');
    return 0;
  }
  const files = emitModules(result.ir);
  if (args.check) return checkOutput(files, outDir!, root);
  writeOutput(files, outDir!, root);
  return 0;
}

function parseArgs(argv: string[]): GenArgs | string {
  const args: GenArgs = { inputs: [], check: false, ir: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--out' || a === '--baseline') {
      const value = argv[++i];
      if (value === undefined) return `${a} needs a value`;
      if (a === '--out') args.out = value;
      else args.baseline = value;
    } else if (a === '--check') args.check = true;
    else if (a === '--ir') args.ir = true;
    else if (a.startsWith('--')) return `unknown option ${a}`;
    else args.inputs.push(a);
  }
  if (args.inputs.length === 0) return 'no schema files or directories given';
  if (!args.ir && args.out === undefined) return '--out <dir> is required';
  return args;
}

/** Expands directories to the `.gdrpc` files under them (skipping the output directory). */
function findSchemas(inputs: string[], outDir: string | undefined): string[] | string {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      if (name === 'node_modules' || name.startsWith('.') || full === outDir) continue;
      if (statSync(full).isDirectory()) walk(full);
      else if (name.endsWith('.gdrpc')) found.push(full);
    }
  };
  for (const input of inputs) {
    let stat;
    try {
      stat = statSync(input);
    } catch {
      return `no such file or directory: ${path.relative(process.cwd(), input)}`;
    }
    if (stat.isDirectory()) walk(input);
    else found.push(input);
  }
  if (found.length === 0) return 'no .gdrpc files found';
  return found;
}

/** The directory output paths are relative to: the deepest directory holding every input. */
function commonRoot(inputs: string[]): string {
  const dirs = inputs.map((p) => (statSync(p).isDirectory() ? p : path.dirname(p)));
  let root = dirs[0]!;
  while (!dirs.every((d) => d === root || d.startsWith(root + path.sep))) root = path.dirname(root);
  return root;
}
