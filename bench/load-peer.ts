// A peer process of bench/load.ts, started through tsx with an IPC channel: typed messages both
// ways, waiting for the next message of a kind with a time limit, and an end that kills a straggler.
import { fork, type ChildProcess } from 'node:child_process';
import { waitExit } from './process.ts';

/** A forked TypeScript program that talks `In` and answers `Out` (each a union tagged by `kind`). */
export class PeerProcess<In extends { kind: string }, Out extends { kind: string }> {
  readonly #child: ChildProcess;
  readonly #inbox: Out[] = [];
  #wake: (() => void) | undefined;
  #exited = false;

  constructor(readonly name: string, file: string, args: string[]) {
    this.#child = fork(file, args, { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.#child.on('message', (message: Out) => { this.#inbox.push(message); this.#wake?.(); });
    this.#child.on('exit', () => { this.#exited = true; this.#wake?.(); });
  }

  /** The process id (to match what UCX logs with it). */
  get pid(): number | undefined { return this.#child.pid; }

  send(message: In): void {
    if (this.#child.connected) this.#child.send(message);
  }

  /** The next message of `kind`; a 'failed' message, an exit or `timeoutMs` rejects. */
  async next<K extends Out['kind']>(kind: K, timeoutMs: number): Promise<Extract<Out, { kind: K }>> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const at = this.#inbox.findIndex((m) => m.kind === kind || m.kind === 'failed');
      if (at >= 0) {
        const [message] = this.#inbox.splice(at, 1) as [Out];
        if (message.kind === 'failed') throw new Error(`${this.name}: ${(message as { message?: string }).message ?? 'failed'}`);
        return message as Extract<Out, { kind: K }>;
      }
      if (this.#exited) throw new Error(`${this.name} exited (${this.#child.exitCode ?? this.#child.signalCode}) before sending '${kind}'`);
      const left = until - Date.now();
      if (left <= 0) throw new Error(`${this.name} sent no '${kind}' within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#wake = () => { clearTimeout(timer); resolve(); };
      });
      this.#wake = undefined;
    }
  }

  /** Waits for the process to end (after a message that tells it to), killing it after `killAfterMs`. */
  end(killAfterMs: number): Promise<void> {
    return waitExit(this.#child, killAfterMs);
  }

  kill(): void {
    if (!this.#exited) this.#child.kill('SIGKILL');
  }
}
