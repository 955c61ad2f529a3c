// Peer processes for the native tests (test/native/peer.ts): a test/support peer driven over IPC,
// one request and one reply per command, events queued until a test waits for them.
import { fileURLToPath } from 'node:url';
import { spawnPeer, type Peer, type PeerExit } from '../support/peer.ts';

const peerScript = fileURLToPath(new URL('./peer.ts', import.meta.url));

interface Reply { id?: number; event?: string; result?: unknown; error?: { code: string; message: string }; tag?: string }

/** A peer process (test/native/peer.ts) with its UCX context initialised. */
export class NativePeer implements AsyncDisposable {
  #nextId = 1;
  #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #events: Reply[] = [];
  #waiters: Array<{ event: string; resolve: (r: Reply) => void }> = [];
  #port = 0;

  private constructor(readonly peer: Peer) {
    void peer.exited.then((exit) => {
      for (const { reject } of this.#pending.values()) reject(new Error(`peer exited (${exit.signal ?? exit.code})`));
      this.#pending.clear();
    });
    peer.child.on('message', (reply: Reply) => this.#receive(reply));
  }

  /** Spawns a peer and initialises its UCX context with `config`; resolves once it listens. */
  static async start(config: Record<string, string>, env: Record<string, string> = {}): Promise<NativePeer> {
    const peer = await spawnPeer(peerScript, { env, ipc: true });
    try {
      const native = new NativePeer(peer);
      native.#port = (await native.call<{ port: number }>('init', { config })).port;
      return native;
    } catch (error) {
      await peer.kill();
      throw error;
    }
  }

  /** The port the peer's listener took. */
  get port(): number { return this.#port; }

  /** Runs `cmd` in the peer; resolves with its result or rejects with its error. */
  call<T = unknown>(cmd: string, args: Record<string, unknown> = {}): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.peer.child.send({ id, cmd, args });
    });
  }

  /** What the peer wrote to stdout so far (UCX prints its protocol tables there). */
  output(): string {
    return this.peer.output();
  }

  /** Resolves on the next event message of that name (e.g. 'posted' after a receive is posted). */
  event(name: string): Promise<Reply> {
    const queued = this.#events.findIndex((e) => e.event === name);
    if (queued >= 0) return Promise.resolve(this.#events.splice(queued, 1)[0]!);
    return new Promise((resolve) => this.#waiters.push({ event: name, resolve }));
  }

  /** Freezes the peer (SIGSTOP), as a hung host would look. */
  stop(): void {
    this.peer.stop();
  }

  /** Kills the peer at once (SIGKILL); resolves when it has exited. */
  kill(): Promise<PeerExit> {
    return this.peer.kill();
  }

  /** Ends the peer process and its group. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.peer.dispose();
  }

  #receive(reply: Reply): void {
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
  }
}
