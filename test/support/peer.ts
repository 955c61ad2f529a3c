// Peer processes of the tests and benches: a TypeScript (tsx) or JavaScript program started in a
// process group of its own, ready once it prints its one ready line (ready-line.ts), and ended
// with its whole group, grandchildren included, however the test went: `await using`, dispose(),
// disposePeers() in a hook, or this process's exit as the last net.
import { spawn, type ChildProcess } from 'node:child_process';
import { basename } from 'node:path';
import { PeerOutput } from './peer-output.ts';
import { readyInfo } from './ready-line.ts';

/** How to start a peer. */
export interface PeerOptions {
  /** Arguments after the program. */
  args?: string[];
  /** Added to this process's environment. */
  env?: NodeJS.ProcessEnv;
  /** Words the peer runs under, e.g. `['ip', 'netns', 'exec', ns]`; they exec the program, so the
   *  group is still the peer's. */
  launcher?: string[];
  /** An IPC channel as well (child.send and 'message'), for peers driven by messages. */
  ipc?: boolean;
  cwd?: string;
  /** How long the ready line may take; generous, as peers start slowly on a loaded 2-core machine. */
  readyTimeoutMs?: number;
  /** Copy the peer's stderr to ours as it comes (it is collected either way); default true. */
  echoStderr?: boolean;
  /** Names the peer in errors; default the program's file name and arguments. */
  name?: string;
  /** Reads the ready info from a line, for a program that predates the ready line (an older
   *  tree's server in bench/isolation.ts); default readyInfo. */
  readyLine?: (line: string) => Record<string, unknown> | undefined;
}

/** How a peer ended: an exit code, or the signal that ended it. */
export interface PeerExit { code: number | null; signal: NodeJS.Signals | null }

const DEFAULT_READY_MS = 180_000;
const DEFAULT_GRACE_MS = 2000;
/** After an exit, how long stdout and stderr may take to deliver what is still in the pipes. */
const DRAIN_MS = 250;

// Every peer not yet ended, only so that the exit hook and disposePeers() can reach them.
const running = new Set<Peer<unknown>>();
process.once('exit', () => { for (const peer of running) peer.signalGroup('SIGKILL'); });

/** A running peer process and its group. */
export class Peer<Ready = Record<string, unknown>> implements AsyncDisposable {
  /** The peer's name in errors. */
  readonly name: string;
  /** The Node child process (for IPC: send and 'message'). */
  readonly child: ChildProcess;
  /** Settles when the peer itself has exited and its output is read. */
  readonly exited: Promise<PeerExit>;
  readonly #stdout: PeerOutput;
  readonly #stderr: PeerOutput;
  readonly #ready: Promise<Ready>;
  // Not typed with Ready: a Peer<{ port: number }> must still pass where a Peer is asked for.
  #settleReady!: { resolve: (info: unknown) => void; reject: (error: Error) => void };
  #readyInfo: Ready | undefined;
  #exit: PeerExit | undefined;

  /** Starts `program`; spawnPeer and runPeer are the ways in. */
  constructor(program: string, options: PeerOptions = {}) {
    const args = options.args ?? [];
    this.name = options.name ?? [basename(program), ...args].join(' ');
    const runtime = /\.[cm]?js$/.test(program) ? [process.execPath, program] : [process.execPath, '--import', 'tsx', program];
    const [command, ...argv] = [...(options.launcher ?? []), ...runtime, ...args];
    this.child = spawn(command!, argv, {
      env: { ...process.env, ...options.env }, cwd: options.cwd, detached: true,
      stdio: ['pipe', 'pipe', 'pipe', ...(options.ipc === true ? ['ipc' as const] : [])],
    });
    // A peer killed while the test writes to it must not fail the test process with EPIPE.
    this.child.stdin!.on('error', () => {});
    running.add(this as Peer<unknown>);
    this.#ready = new Promise<Ready>((resolve, reject) => { this.#settleReady = { resolve: resolve as (info: unknown) => void, reject }; });
    this.#ready.catch(() => {});
    const parse = options.readyLine ?? readyInfo;
    this.#stdout = new PeerOutput(this.child.stdout!, (line) => this.#readFromLine(line, parse));
    this.#stderr = new PeerOutput(this.child.stderr!, undefined, options.echoStderr === false ? undefined : process.stderr);
    this.exited = this.#watchExit();
  }

  #readFromLine(line: string, parse: (line: string) => Record<string, unknown> | undefined): void {
    if (this.#readyInfo !== undefined) return;
    try {
      const info = parse(line) as Ready | undefined;
      if (info !== undefined) { this.#readyInfo = info; this.#settleReady.resolve(info); }
    } catch (error) { this.#settleReady.reject(error as Error); }
  }

  /** Settles once the peer exited and its pipes are read (or had DRAIN_MS to be: a grandchild may
   *  hold them open); a peer that never got ready fails its readiness with its stderr. */
  #watchExit(): Promise<PeerExit> {
    return new Promise<PeerExit>((resolve) => {
      const ended = (exit: PeerExit): void => {
        this.#exit ??= exit;
        const drained = (): void => {
          this.#stdout.close();
          this.#stderr.close();
          running.delete(this as Peer<unknown>);
          this.#settleReady.reject(new Error(`${this.name} exited (${describeExit(this.#exit!)}) before its ready line; ` +
            `stderr:\n${this.#stderr.tail()}\nstdout:\n${this.#stdout.tail()}`));
          resolve(this.#exit!);
        };
        const timer = setTimeout(drained, DRAIN_MS);
        this.child.once('close', () => { clearTimeout(timer); drained(); });
      };
      this.child.once('exit', (code, signal) => ended({ code, signal }));
      this.child.once('error', (error) => {
        this.#settleReady.reject(new Error(`${this.name} could not start: ${error.message}`));
        if (this.child.pid === undefined) ended({ code: null, signal: null });
      });
    });
  }

  /** The process id; the group id is the same. */
  get pid(): number { return this.child.pid!; }
  /** What the peer put in its ready line (valid once spawnPeer has resolved). */
  get ready(): Ready { return this.#readyInfo!; }
  /** True until the peer itself has exited. */
  get alive(): boolean { return this.child.exitCode === null && this.child.signalCode === null; }
  /** How the peer ended, once it has. */
  get exit(): PeerExit | undefined { return this.#exit; }

  /** Everything the peer printed on stdout so far. */
  output(): string { return this.#stdout.text(); }
  /** Everything the peer printed on stderr so far. */
  errors(): string { return this.#stderr.text(); }
  /** The complete stdout lines so far. */
  get lines(): readonly string[] { return this.#stdout.lines; }

  /** The first stdout line (from line index `from` on) matching `pattern`; fails if the peer exits first. */
  waitFor(pattern: RegExp, timeoutMs = 60_000, from = 0): Promise<string> {
    return this.#stdout.waitFor(pattern, `${this.name} (pid ${this.pid})`, timeoutMs, from);
  }

  /** The next stdout line matching `pattern`, among those printed from now on. */
  nextLine(pattern: RegExp, timeoutMs = 60_000): Promise<string> {
    return this.waitFor(pattern, timeoutMs, this.lines.length);
  }

  /** Writes one line to the peer's stdin. */
  send(line: string): void { this.child.stdin!.write(`${line}\n`); }

  /** Sends `signal` to the peer process itself (not its group). */
  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  /** Sends `signal` to the peer's whole group; quiet when the group is gone. */
  signalGroup(signal: NodeJS.Signals): void {
    try { process.kill(-this.pid, signal); } catch { /* the group is gone */ }
  }

  /** Freezes the peer's group (SIGSTOP), as a hung host would look. */
  stop(): void { this.signalGroup('SIGSTOP'); }
  /** Lets a stopped group run again (SIGCONT). */
  resume(): void { this.signalGroup('SIGCONT'); }

  /** Kills the whole group at once (SIGKILL); resolves when the peer has exited. */
  kill(): Promise<PeerExit> {
    this.signalGroup('SIGKILL');
    return this.exited;
  }

  /** Closes the peer's stdin (peers take that as their cue to finish) and waits `graceMs` for
   *  it to exit on its own before disposing of it. */
  async end(graceMs = 5000): Promise<PeerExit> {
    this.child.stdin!.end();
    if (await within(this.exited, graceMs)) { this.signalGroup('SIGKILL'); return this.exited; }
    return this.dispose();
  }

  /** Ends the group: SIGTERM (a stopped group is continued so that it sees it), then SIGKILL
   *  after `graceMs`, and SIGKILL once more after the peer exits for anything it left behind. */
  async dispose(graceMs = DEFAULT_GRACE_MS): Promise<PeerExit> {
    if (this.alive) {
      this.signalGroup('SIGTERM');
      this.signalGroup('SIGCONT');
      await within(this.exited, graceMs);
    }
    this.signalGroup('SIGKILL');
    return this.exited;
  }

  /** `await using peer = await spawnPeer(...)` disposes of the peer at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> { await this.dispose(); }

  /** Resolves with the ready info; fails on exit first, a malformed ready line, or after `timeoutMs`. */
  async untilReady(timeoutMs: number): Promise<Ready> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${this.name} (pid ${this.pid}) printed no ready line within ${timeoutMs} ms; ` +
        `stderr:\n${this.#stderr.tail()}\nstdout:\n${this.#stdout.tail()}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.#ready, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Starts a peer and resolves once its ready line came; a peer that fails to get ready is killed
 *  and the error names its exit and the tail of its stderr. */
export async function spawnPeer<Ready = Record<string, unknown>>(program: string, options: PeerOptions = {}): Promise<Peer<Ready>> {
  const peer = new Peer<Ready>(program, options);
  try {
    await peer.untilReady(options.readyTimeoutMs ?? DEFAULT_READY_MS);
    return peer;
  } catch (error) {
    await peer.kill();
    throw error;
  }
}

/** Disposes of every peer still running: the afterEach/afterAll net for peers that a hook started
 *  or that a test could not hold with `await using`. */
export async function disposePeers(): Promise<void> {
  await Promise.all([...running].map((peer) => peer.dispose()));
}

/** The end of a program run to completion by runPeer. */
export interface PeerRun extends PeerExit { stdout: string; stderr: string; timedOut: boolean }

/** Runs `program` to its end, no ready line needed, with the same group kill after `limitMs`. */
export async function runPeer(program: string, limitMs: number, options: PeerOptions = {}): Promise<PeerRun> {
  await using peer = new Peer(program, options);
  const timedOut = !(await within(peer.exited, limitMs));
  const exit = await peer.dispose();
  return { ...exit, stdout: peer.output(), stderr: peer.errors(), timedOut };
}

/** True when `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), ms); });
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

function describeExit(exit: PeerExit): string {
  return exit.signal !== null ? `signal ${exit.signal}` : `code ${exit.code}`;
}
