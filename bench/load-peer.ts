// A peer process of bench/load.ts: a test/support peer with an IPC channel, typed messages both
// ways, waiting for the next message of a kind with a time limit, and an end that kills a straggler.
import { spawnPeer, type Peer } from '../test/support/peer.ts';

/** A TypeScript program that talks `In` and answers `Out` (each a union tagged by `kind`). */
export class PeerProcess<In extends { kind: string }, Out extends { kind: string }> {
  readonly #inbox: Out[] = [];
  #wake: (() => void) | undefined;

  private constructor(readonly name: string, readonly peer: Peer) {
    peer.child.on('message', (message: Out) => { this.#inbox.push(message); this.#wake?.(); });
    void peer.exited.then(() => this.#wake?.());
  }

  /** Starts `file` and resolves once it announced ready; `readyTimeoutMs` bounds that. */
  static async start<In extends { kind: string }, Out extends { kind: string }>(name: string, file: string, args: string[],
    readyTimeoutMs: number): Promise<PeerProcess<In, Out>> {
    return new PeerProcess<In, Out>(name, await spawnPeer(file, { args, ipc: true, readyTimeoutMs, name }));
  }

  /** The process id (to match what UCX logs with it). */
  get pid(): number { return this.peer.pid; }

  /** Sends `message` unless the peer is already gone. */
  send(message: In): void {
    if (this.peer.child.connected) this.peer.child.send(message);
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
      if (!this.peer.alive) throw new Error(`${this.name} exited (${this.peer.child.exitCode ?? this.peer.child.signalCode}) before sending '${kind}'`);
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
  async end(killAfterMs: number): Promise<void> {
    await this.peer.end(killAfterMs);
  }

  /** Kills the process and its group at once. */
  kill(): void {
    void this.peer.kill();
  }
}
