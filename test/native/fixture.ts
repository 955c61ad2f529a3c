// Peer processes for the native tests: spawned with tsx, driven over IPC, always killed at the end.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';

const peerScript = fileURLToPath(new URL('./peer.ts', import.meta.url));
const live = new Set<Peer>();

interface Reply { id?: number; event?: string; result?: unknown; error?: { code: string; message: string }; tag?: string }

/** A peer process (test/native/peer.ts). */
export class Peer {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  #nextId = 1;
  #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #events: Reply[] = [];
  #waiters: Array<{ event: string; resolve: (r: Reply) => void }> = [];
  #stdout = '';

  private constructor(env: Record<string, string>, captureStdout: boolean) {
    this.child = spawn(process.execPath, ['--import', 'tsx', peerScript], {
      stdio: ['ignore', captureStdout ? 'pipe' : 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, ...env },
    });
    this.child.stdout?.setEncoding('utf8').on('data', (chunk: string) => { this.#stdout += chunk; });
    live.add(this);
    this.exited = new Promise((resolve) => this.child.once('exit', (code, signal) => {
      live.delete(this);
      for (const { reject } of this.#pending.values()) reject(new Error(`peer exited (${signal ?? code})`));
      this.#pending.clear();
      resolve(code);
    }));
    this.child.on('message', (reply: Reply) => {
      if (reply.id !== undefined) {
        const pending = this.#pending.get(reply.id);
        this.#pending.delete(reply.id);
        if (reply.error) pending?.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code }));
        else pending?.resolve(reply.result);
        return;
      }
      const waiter = this.#waiters.findIndex((w) => w.event === reply.event);
      if (waiter >= 0) this.#waiters.splice(waiter, 1)[0]!.resolve(reply);
      else this.#events.push(reply);
    });
  }

  /** Spawns a peer and initialises its UCX context with `config`; resolves with the peer and its port. */
  static async start(config: Record<string, string>, env: Record<string, string> = {}, options: { captureStdout?: boolean } = {}): Promise<Peer & { port: number }> {
    const peer = new Peer(env, options.captureStdout === true);
    await peer.event('ready');
    const { port } = await peer.call<{ port: number }>('init', { config });
    return Object.assign(peer, { port });
  }

  call<T = unknown>(cmd: string, args: Record<string, unknown> = {}): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, cmd, args });
    });
  }

  /** What the peer wrote to stdout so far (started with captureStdout; UCX prints its protocol tables there). */
  output(): string {
    return this.#stdout;
  }

  /** Resolves on the next event message of that name (e.g. 'posted' after a receive is posted). */
  event(name: string): Promise<Reply> {
    const queued = this.#events.findIndex((e) => e.event === name);
    if (queued >= 0) return Promise.resolve(this.#events.splice(queued, 1)[0]!);
    return new Promise((resolve) => this.#waiters.push({ event: name, resolve }));
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<number | null> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }
}

/** Kills every peer still alive after each test. */
export function cleanupPeers(): void {
  afterEach(async () => {
    await Promise.all([...live].map((peer) => peer.kill()));
  });
}

process.once('exit', () => {
  for (const peer of live) peer.child.kill('SIGKILL');
});
