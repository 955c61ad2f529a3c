// Entry of the `gdrpc` command: global options, then one module per subcommand, loaded only when
// that command runs (so `--version` and `--help` load neither the native addon nor the generator).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GdrpcError } from '../errors.ts';
import { packageRoot } from '../package-root.ts';
import { ExitCode, parseCommandLine, usageError } from './command-line.ts';

const usage = `usage: gdrpc <command> [options]
       gdrpc --version | --help

commands:
  info [--json]                   UCX, transports, CUDA and whether CUDA memory can be mapped
  doctor [--json]                 GPUDirect checklist: GPUs, peer access, topology, RDMA, UCX paths
  gen <files|dirs> --out <dir>    generate TypeScript from .gdrpc schemas (--check, --ir, ...)
  help [<command>]                this text, or a command's (same as gdrpc <command> --help)

options:
  -h, --help                      this text
  -v, --version                   print the gdrpc version

exit status: 0 success; 1 failure; 2 usage error; 3 doctor found no GPU path (host tensors work).
Details: gdrpc <command> --help, and docs/cli.md.`;

// The top level as a command of its own, nameless in messages ("gdrpc: unknown command ...").
const top = {
  name: '',
  usage,
  options: { version: { type: 'boolean', short: 'v' } },
} as const;

type Command = (argv: string[]) => Promise<number>;

const commands: Record<string, () => Promise<Command>> = {
  info: async () => (await import('./info.ts')).runInfo,
  doctor: async () => (await import('./doctor.ts')).runDoctor,
  // codegen/gen.ts, not the codegen entry: it loads ts-morph only once it emits code.
  gen: async () => (await import('../../codegen/gen.ts')).runGen,
};

/** The version in the package's package.json. */
function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version?: unknown };
  return String(pkg.version ?? 'unknown');
}

/** Runs the command line and returns the process exit code. */
export async function main(argv: string[]): Promise<number> {
  // Global options come before the command; everything after it is the command's.
  const at = argv.findIndex((a) => !a.startsWith('-'));
  const [globals, name, rest] = at < 0 ? [argv, undefined, []] : [argv.slice(0, at), argv[at]!, argv.slice(at + 1)];
  const parsed = parseCommandLine(top, globals);
  if (typeof parsed === 'number') return parsed;
  if (parsed.values.version) {
    process.stdout.write(`${packageVersion()}\n`);
    return ExitCode.OK;
  }
  if (name === undefined) return usageError(top, 'no command given');
  if (name === 'help') {
    if (rest.length > 0) return main([...rest, '--help']);
    process.stdout.write(`${usage}\n`);
    return ExitCode.OK;
  }
  const load = commands[name];
  if (!load) return usageError(top, `unknown command '${name}'`);
  try {
    return await (await load())(rest);
  } catch (error) {
    // Commands report what they can; anything else is one line, never a stack trace.
    console.error(`gdrpc ${name}: ${GdrpcError.from(error).rawMessage}`);
    return ExitCode.FAILURE;
  }
}
