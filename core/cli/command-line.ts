// What every gdrpc command shares: its exit statuses, options declared for node:util parseArgs,
// -h/--help, and how a usage error is reported (the command's usage on stderr, exit 2).
import { parseArgs } from 'node:util';

/** Exit statuses of the gdrpc command (docs/cli.md). */
export const ExitCode = {
  OK: 0,
  /** The command ran and failed: a doctor check, stale output under `gen --check`, a missing dependency. */
  FAILURE: 1,
  /** Bad arguments (or, for `gen`, schema errors): nothing was done. */
  USAGE: 2,
  /** `doctor`: everything that applies works, but there is no GPU path (no CUDA driver or no GPU). */
  NO_GPU_PATH: 3,
} as const;

type OptionsConfig = Record<string, { type: 'string' | 'boolean'; short?: string }>;

/** One command's command line: its name, its help text and the options it takes. */
export interface CommandSpec<T extends OptionsConfig = OptionsConfig> {
  /** As in `gdrpc <name>`, for messages ('' for gdrpc itself). */
  name: string;
  /** The whole help text, starting with `usage:`; -h/--help is added to every command. */
  usage: string;
  options: T;
  /** Whether the command takes positional arguments (gen's files); otherwise they are errors. */
  positionals?: boolean;
}

const helpOption = { help: { type: 'boolean', short: 'h' } } as const;

type Config<T extends OptionsConfig> = {
  args: string[];
  options: T & typeof helpOption;
  strict: true;
  allowPositionals: boolean;
};

/** What parseArgs made of a command line: typed option values and the positionals. */
export type CommandLine<T extends OptionsConfig> = ReturnType<typeof parseArgs<Config<T>>>;

/**
 * Parses `argv` for `spec`. On -h/--help it prints the usage to stdout and returns 0; on a usage
 * error it reports it (usageError) and returns 2. Either way the caller returns that number.
 */
export function parseCommandLine<const T extends OptionsConfig>(spec: CommandSpec<T>, argv: string[]): CommandLine<T> | number {
  let parsed: CommandLine<T>;
  try {
    const config: Config<T> = {
      args: argv, options: { ...spec.options, ...helpOption }, strict: true, allowPositionals: spec.positionals ?? false,
    };
    parsed = parseArgs(config);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code !== 'string' || !code.startsWith('ERR_PARSE_ARGS_')) throw error;
    return usageError(spec, parseArgsMessage(code, (error as Error).message));
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(`${spec.usage}\n`);
    return ExitCode.OK;
  }
  return parsed;
}

/** Reports a usage error: the message, then the command's usage, on stderr; returns 2. */
export function usageError(spec: Pick<CommandSpec, 'name' | 'usage'>, message: string): number {
  const command = spec.name === '' ? 'gdrpc' : `gdrpc ${spec.name}`;
  process.stderr.write(`${command}: ${message}\n\n${spec.usage}\n`);
  return ExitCode.USAGE;
}

/** parseArgs's messages, shortened: its hint about `--` reads as noise next to the usage. */
function parseArgsMessage(code: string, message: string): string {
  const quoted = /'([^']*)'/.exec(message)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && quoted) return `unknown option ${quoted}`;
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL' && quoted) return `unexpected argument ${quoted}`;
  return message.charAt(0).toLowerCase() + message.slice(1);
}
