// The owner side of remote tensors (`@remote` placement) for one Runtime: the table of exposed
// tensors and the Server that answers their pulls (docs/wire.md "Remote handle"). The 16-byte
// capability makes handles unguessable, and an entry is looked up, never an address trusted, so a
// pull after release is NOT_FOUND and never reads other memory.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { Code, GdrpcError } from '../../errors.ts';
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import { memoryTypeOf } from './memory-support.ts';

/** What the owner needs of a Server: where it listens, and how to stop it. */
export interface OwnerServer {
  readonly address: { host: string; port: number } | undefined;
  shutdown(options?: { graceMs?: number }): Promise<void>;
}

/** An exposed tensor; `claimed` while a pull that spends it (pull, pullMany, pullStacked) runs. */
interface Entry { tensor: Tensor; secret: Uint8Array; release: () => void; claimed: boolean }

/** A handle taken by a pull that spends it: spend() once its answer is over, unclaim() when the
 *  pull failed before answering (the handle is pullable again). */
export interface Claim { readonly tensor: Tensor; spend(): void; unclaim(): void }

/** A handle's capability, and how many of them one draw from the OS makes. */
const SECRET_BYTES = 16;
const RANDOM_BATCH_BYTES = 256 * SECRET_BYTES;

/** One runtime's exposed remote tensors and the servers that can answer pulls of them. */
export class RemoteOwner {
  readonly #entries = new Map<number, Entry>();
  #nextId = 1;
  #random: Buffer = Buffer.alloc(0);
  #randomAt = 0;
  /** Servers of this runtime that listen: the first also answers pulls, with its own address and token. */
  readonly #listening = new Set<OwnerServer>();
  /** The server serveRemoteTensors started, for a runtime without a listening Server of its own:
   *  pulls are never served on an address, or without a token, that nobody chose. */
  dedicated: OwnerServer | undefined;

  /** A server of this runtime started or stopped listening. */
  listening(server: OwnerServer, on: boolean): void {
    if (on) this.#listening.add(server);
    else this.#listening.delete(server);
  }

  /** Where pulls are served; FAILED_PRECONDITION when nowhere. */
  address(): { host: string; port: number } {
    const first = this.#listening.values().next().value as OwnerServer | undefined;
    if (first?.address !== undefined) return first.address;
    if (this.dedicated?.address !== undefined) return this.dedicated.address;
    throw new GdrpcError(Code.FAILED_PRECONDITION, 'passing an @remote tensor needs a listening Server on this runtime, or serveRemoteTensors({ host, token }) to say where pulls are served');
  }

  /** Registers `tensor` for a peer at `peer` ("host:port"); `track` ties the entry's life to the
   *  call (it gets the entry's removal and returns what releases it). Returns the handle. */
  expose(tensor: Tensor, peer: string, track: (forget: () => void) => () => void): TensorWire {
    const listen = this.address();
    const x = this.#nextId;
    this.#nextId = x >= 0xffff_ffff ? 1 : x + 1;
    const secret = this.#secret();
    const release = track(() => { this.#entries.delete(x); });
    this.#entries.set(x, { tensor, secret, release, claimed: false });
    return {
      dt: tensor.dtype, sh: [...tensor.shape], n: tensor.byteLength, mt: memoryTypeOf(tensor), m: 'h',
      o: `${advertisedHost(listen.host, peer)}:${listen.port}`, x, s: secret,
    };
  }

  /** 16 fresh random bytes: drawn from the OS 4 KiB at a time (a batch of KV blocks exposes
   *  thousands of handles in one call; one randomBytes each cost about 9 µs on the CPU box), each bytes
   *  handed out once and copied out of the batch. */
  #secret(): Uint8Array {
    if (this.#random.length - this.#randomAt < SECRET_BYTES) {
      this.#random = randomBytes(RANDOM_BATCH_BYTES);
      this.#randomAt = 0;
    }
    const secret = new Uint8Array(this.#random.subarray(this.#randomAt, this.#randomAt + SECRET_BYTES));
    this.#random.fill(0, this.#randomAt, this.#randomAt + SECRET_BYTES);
    this.#randomAt += SECRET_BYTES;
    return secret;
  }

  /** The tensor behind handle `x` if `secret` matches; NOT_FOUND otherwise (unknown, released, wrong). */
  lookup(x: number, secret: Uint8Array): Tensor {
    return this.#entry(x, secret).tensor;
  }

  /** Handle `x` for a pull that spends it: as lookup, and NOT_FOUND while another such pull has
   *  it. Every pull asked before the first one's bytes had left used to be served: a peer that
   *  never took them made one handle announce hundreds of thousands of transfers. */
  claim(x: number, secret: Uint8Array): Claim {
    const entry = this.#entry(x, secret);
    if (entry.claimed) throw new GdrpcError(Code.NOT_FOUND, `remote tensor ${x} is being pulled by another call (a handle is pulled once)`);
    entry.claimed = true;
    return { tensor: entry.tensor, spend: entry.release, unclaim: () => { entry.claimed = false; } };
  }

  #entry(x: number, secret: Uint8Array): Entry {
    const entry = this.#entries.get(x);
    if (entry === undefined || secret.length !== entry.secret.length || !timingSafeEqual(secret, entry.secret)) {
      throw new GdrpcError(Code.NOT_FOUND, `remote tensor ${x} is unknown or has been released`);
    }
    // Its owner released the tensor while it was exposed (an answer's tensor released in
    // afterSend, once the handle had left): nothing can be sent, so the pull fails now. Before, a
    // pull was answered with the descriptor and no bytes, and an honest puller waited out
    // transferTimeoutMs (30 s; a helper session's review, 2026-12-07).
    if (entry.tensor.released) {
      this.#entries.delete(x);
      entry.release();
      throw new GdrpcError(Code.NOT_FOUND, `remote tensor ${x} has been released by its owner`);
    }
    return entry;
  }

  /** Remote tensors currently exposed (leak checks). */
  get size(): number { return this.#entries.size; }
}

function advertisedHost(bound: string, peer: string): string {
  if (bound !== '0.0.0.0' && bound !== '::') return bound;
  const peerHost = peer.slice(0, peer.lastIndexOf(':'));
  if (peerHost === '127.0.0.1' || peerHost === 'localhost' || peerHost === '::1') return '127.0.0.1';
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? []) if (address.family === 'IPv4' && !address.internal) return address.address;
  }
  return '127.0.0.1';
}
