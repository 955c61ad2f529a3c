// Entry of the `gdrpc` command: dispatches to one module per subcommand.
import { GdrpcError } from '../errors.ts';

const usage = `usage: gdrpc <command> [options]

commands:
  info [--json]                       UCX, transports, CUDA and whether CUDA memory can be mapped
  doctor [--json]                     GPUDirect checklist: GPUs, peer access, topology, RDMA, UCX paths
  gen <files|dirs> --out <dir>        generate TypeScript from .gdrpc schemas (--check, --ir)
  help                                this text`;

type Command = (argv: string[]) => Promise<number>;

const commands: Record<string, () => Promise<Command>> = {
  info: async () => (await import('./info.ts')).runInfo,
  doctor: async () => (await import('./doctor.ts')).runDoctor,
  gen: async () => (await import('../../codegen/index.ts')).runGen,
};

/** Runs the command line and returns the process exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    console.log(usage);
    return name === undefined ? 1 : 0;
  }
  const load = commands[name];
  if (!load) {
    console.error(`gdrpc: unknown command '${name}'\n\n${usage}`);
    return 2;
  }
  try {
    return await (await load())(rest);
  } catch (error) {
    const e = GdrpcError.from(error);
    console.error(`gdrpc ${name}: ${e.message}`);
    return 1;
  }
}
