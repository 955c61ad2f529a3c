// The one option `info` and `doctor` take.

/** `--json` or nothing; anything else prints usage and gives undefined (exit code 2). */
export function parseJsonFlag(command: string, argv: string[]): { json: boolean } | undefined {
  const unknown = argv.find((a) => a !== '--json');
  if (unknown !== undefined) {
    console.error(`gdrpc ${command}: unknown option ${unknown} (usage: gdrpc ${command} [--json])`);
    return undefined;
  }
  return { json: argv.includes('--json') };
}
