// --version, and -h/--help and usage errors on every command: help goes to stdout with exit 0,
// a usage error to stderr (the message, then that command's usage) with exit 2.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { gdrpc } from './gdrpc-process.ts';

const version: string = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;

describe('gdrpc --version', () => {
  it.each([['--version'], ['-v']])('%s prints the package version', async (flag) => {
    const r = await gdrpc([flag]);
    expect(r).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });
});

// [command words, how its usage starts]
const commands: Array<[string[], string]> = [
  [[], 'usage: gdrpc <command>'],
  [['info'], 'usage: gdrpc info [--json]'],
  [['doctor'], 'usage: gdrpc doctor [--json]'],
  [['gen'], 'usage: gdrpc gen <files or dirs> --out <dir>'],
];

describe.each(commands)('gdrpc %s', (words, usage) => {
  it.each([['--help'], ['-h']])(`${words.join(' ')} %s prints its usage to stdout and exits 0`, async (flag) => {
    const r = await gdrpc([...words, flag]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.startsWith(usage)).toBe(true);
    expect(r.stdout).toMatch(/-h, --help/);
    expect(r.stdout).toMatch(/^exit status/m);
  });

  it('rejects an unknown option with exit 2 and its usage on stderr', async () => {
    const r = await gdrpc([...words, '--bogus']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^gdrpc( \w+)?: unknown option --bogus\n/);
    expect(r.stderr).toContain(usage);
  });
});

describe('usage errors', () => {
  // [arguments, what the message says]
  const cases: Array<[string[], RegExp]> = [
    [[], /^gdrpc: no command given/],
    [['frobnicate'], /^gdrpc: unknown command 'frobnicate'/],
    [['-x'], /^gdrpc: unknown option -x/],
    [['info', 'extra'], /^gdrpc info: unexpected argument extra/],
    [['doctor', 'extra'], /^gdrpc doctor: unexpected argument extra/],
    [['info', '--json=yes'], /^gdrpc info: option '--json' does not take an argument/],
    [['gen'], /^gdrpc gen: no schema files or directories given/],
    [['gen', 'schemas'], /^gdrpc gen: --out <dir> is required/],
    [['gen', 'schemas', '--out'], /^gdrpc gen: option '-o, --out <value>' argument missing/],
    [['gen', 'schemas', '--out', 'x', '--import-extension', 'mjs'], /^gdrpc gen: --import-extension is js or ts, not 'mjs'/],
  ];
  it.each(cases)('gdrpc %j exits 2 with the message and usage on stderr', async (args, message) => {
    const r = await gdrpc(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toMatch(/\n\nusage: gdrpc /);
  });
});

describe('gdrpc help <command>', () => {
  it.each([['info'], ['doctor'], ['gen']])('help %s is %s --help', async (name) => {
    const [help, flag] = await Promise.all([gdrpc(['help', name]), gdrpc([name, '--help'])]);
    expect(help.code).toBe(0);
    expect(help.stdout).toBe(flag.stdout);
    expect(help.stdout.startsWith(`usage: gdrpc ${name}`)).toBe(true);
  });
});
