// Accepts connections on a socket address; each accepted one becomes a server-side Endpoint.
import { EventEmitter } from 'eventemitter3';
import { Code, GdrpcError } from '../errors.ts';
import { native } from '../native.ts';
import { checkObject, checkPort, checkString, describe, invalid } from './check.ts';
import { Endpoint } from './endpoint.ts';
import type { NativeEndpoint, NativeListener } from './native-types.ts';
import { Worker } from './worker.ts';

export interface ListenerOptions {
  host?: string;                                          // default '0.0.0.0'
  port?: number;                                          // default 0 (any)
  /** Decide on each connection request; returning false rejects it (ucp_listener_reject). */
  accept?: (request: { clientAddress: string; clientPort: number }) => boolean;
}

/** A UCP listener. Emits 'connection' with each accepted Endpoint, 'error' when accepting fails. */
export class Listener extends EventEmitter<{ connection: [Endpoint]; error: [GdrpcError] }> {
  readonly worker: Worker;
  /** Bound address. */
  readonly host: string;
  /** Bound port (the real one when 0 was asked). */
  readonly port: number;
  readonly #native: NativeListener;
  #closed = false;

  private constructor(worker: Worker, create: (self: Listener) => NativeListener) {
    super();
    this.worker = worker;
    this.#native = create(this);
    this.host = this.#native.host;
    this.port = this.#native.port;
    Worker.adopt(worker, this);
  }

  static create(worker: Worker, options: ListenerOptions = {}): Listener {
    const nativeWorker = Worker.nativeOf(worker);
    checkObject(options, 'options');
    const host = checkString(options.host ?? '0.0.0.0', 'options.host');
    const port = checkPort(options.port ?? 0, 'options.port');
    const accept = options.accept;
    if (accept !== undefined && typeof accept !== 'function') {
      throw invalid(`options.accept must be a function, got ${describe(accept)}`);
    }
    return new Listener(worker, (self) => new (native().Listener)(nativeWorker, host, port, (kind, a, b) => {
      if (kind === 'request') return accept ? accept({ clientAddress: String(a), clientPort: Number(b) }) === true : true;
      if (kind === 'connection') {
        const endpoint = new Endpoint(worker, a as NativeEndpoint);
        // Known to its worker until it ends, whether this listener still listens or not.
        Worker.acceptedPeers(worker).add(endpoint);
        self.emit('connection', endpoint);
      } else {
        self.emit('error', GdrpcError.from(a, Code.UNAVAILABLE));
      }
      return undefined;
    }));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Stops listening; pending connection requests are rejected. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#native.close();
    Worker.release(this.worker, this);
  }
}
