// The client half of the handshake (docs/wire.md "Handshake and admission"): wait for HELLO on
// the new endpoint, answer AUTH (with the HMAC proof when challenged), wait for READY.
import { closeUcxDescriptorsOnExec, Endpoint, portOf } from '../../ucx/index.ts';
import { Code, GdrpcError, isCode } from '../../errors.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { ConnectionKey } from '../../wire/tag.ts';
import { authProof } from './auth.ts';
import { cudaReceives } from '../runtime/memory-support.ts';
import { Connection, type PeerLimits } from './connection.ts';
import type { FrameHandler } from './inbound.ts';
import { windowRefusal } from './window.ts';
import { resolveHost } from './resolve.ts';
import { MAX_LEFT_HELLO_RECEIVES, MAX_LEFT_PER_HELLO, type FrameSink } from '../runtime/dispatcher.ts';
import { DEFAULT_FRAME_BYTES, type Runtime } from '../runtime/runtime.ts';

/** `signal` gives the connect up (CANCELLED), whatever it is waiting for; `narrowWindow` keeps
 *  the 256 KiB opening window (a pull's connection) instead of taking from maxWindowBytes. */
export interface HandshakeOptions { token?: string; livenessMs: number; timeoutMs: number; name?: string; signal?: AbortSignal; narrowWindow?: boolean }

/** Connects to host:port and completes admission; the connection comes back ready for calls. */
export async function connectAndAdmit(runtime: Runtime, host: string, port: number, options: HandshakeOptions): Promise<Connection> {
  const forward = helloForwarder(runtime, host, port);
  const deadline = new ConnectDeadline(host, port, options);
  const address = await resolveHost(host, options.timeoutMs, options.signal);
  const dial = (): Endpoint => Endpoint.connect(runtime.worker, { host: address, port, name: options.name ?? 'gdrpc-client', label: host });
  let endpoint: Endpoint | undefined;
  let connection: Connection | undefined;
  let helloCame: (() => void) | undefined;
  /** Gives the port up once the connection is gone (expectHello). */
  let releasePort: (() => void) | undefined;
  /** This side's address on the connection ("address:port"), which the proof binds. */
  let local: string | undefined;
  try {
    while (helloCame === undefined) {
      endpoint = dial();
      local = endpoint.localAddress();
      const localPort = local === undefined ? undefined : portOf(local);
      if (localPort === undefined) break;
      if (!runtime.dispatcher.awaitsHello(localPort)) {
        const wait = runtime.dispatcher.expectHello(localPort, forward);
        helloCame = wait.ended;
        releasePort = wait.release;
        break;
      }
      // Linux gives one local port to connections to different servers: this one waits for the
      // other's HELLO to come (or its handshake to give up), then dials again.
      void endpoint.close({ force: true }).catch(() => {});
      endpoint = undefined;
      await runtime.dispatcher.portFree(localPort, deadline.giveUp()).catch(() => {
        throw deadline.noTurn(`another connection of this process was waiting for its HELLO on the port this one got, ${localPort}`);
      });
    }
    if (helloCame === undefined) {
      // Where UCX does not tell this side's address, handshakes take turns: the one whose turn
      // it is takes a HELLO naming no awaited port, and the wait counts against the connect
      // timeout. The endpoint made before the turn is given up for one made within it.
      void endpoint?.close({ force: true }).catch(() => {});
      // The endpoint made within the turn is not the one `local` was read of: its proof binds none.
      local = undefined;
      helloCame = await runtime.dispatcher.awaitHelloTurn(forward, deadline.giveUp()).catch(() => {
        throw deadline.noTurn('this process\'s other connections were waiting for their servers\' HELLO (one at a time where UCX does not tell a connection\'s address)');
      });
      endpoint = dial();
    }
    connection = new Connection(runtime, endpoint!, options.livenessMs);
    openOwnWindow(connection, options);
    forward.target = connection;
    await admit(connection, { ...options, timeoutMs: deadline.left() }, helloCame, local);
    if (releasePort !== undefined) releaseWhenGone(connection, releasePort);
    return connection;
  } catch (error) {
    const failure = connectFailureHint(runtime, connection, GdrpcError.from(error, Code.UNAVAILABLE), `${host}:${port}`);
    if (connection !== undefined) connection.close(failure);
    else void endpoint?.close({ force: true }).catch(() => {});
    releasePort?.();
    throw failure;
  } finally {
    deadline.clear();
    helloCame?.();
  }
}

/** Where what arrives under the HELLO key goes: to the connection once there is one. */
function helloForwarder(runtime: Runtime, host: string, port: number): FrameSink & { target?: Connection } {
  // The server knows no key of this side yet, and UCX tag matching does not say which endpoint a
  // message came from: HELLO comes under the key of the port the server saw the connection come
  // from, which is this endpoint's own (and under key 0, for connections made in turns).
  // Everything after it arrives under the key this side drew, which only that server learns.
  // What else arrives under the HELLO key is no HELLO: a message too long for one is dropped and
  // the handshake waits on for its server's HELLO within its timeout; one that does not come whole
  // is left to UCX (the dispatcher's receive-buffers.ts), and past MAX_LEFT_PER_HELLO of those the
  // handshake fails (onStalled), since each keeps memory until its sender's endpoint closes.
  return {
    onMessage(source, length) { this.target?.onMessage(source, length); },
    onOversized() {},
    onStrayData(message, low, framesWaiting) { if (this.target !== undefined) this.target.onStrayData(message, low, framesWaiting); else runtime.dispatcher.drop(message); },
    onStalled() {
      this.target?.close(new GdrpcError(Code.UNAVAILABLE, `more than ${MAX_LEFT_PER_HELLO} messages under the HELLO key of the connection to ${host}:${port} did not arrive whole (or the process holds ${MAX_LEFT_HELLO_RECEIVES} such): another peer is sending under it (docs/security.md "Receives left under a HELLO key")`));
    },
  };
}

/** The connect timeout, counted from the start of the connect, over the waits for a turn. */
class ConnectDeadline {
  readonly #started = performance.now();
  // A timer of its own, cleared when the handshake ends, not AbortSignal.timeout: in a test process
  // of this suite (test/rpc/hello-routing, under two CPU hogs) AbortSignal.timeout(1000) fired 14 s
  // late in 3 of 12 runs, and the connection waiting for its turn overran its connect timeout by
  // as much; with a plain timer, 16 of 16 on time.
  readonly #timers: NodeJS.Timeout[] = [];

  constructor(private readonly host: string, private readonly port: number, private readonly options: HandshakeOptions) {}

  /** Milliseconds of the connect timeout left (at least 1). */
  left(): number {
    return Math.max(1, Math.round(this.options.timeoutMs - (performance.now() - this.#started)));
  }

  /** Ends a wait: the time left, or the caller's signal. */
  giveUp(): AbortSignal {
    return this.options.signal === undefined ? this.#timeout(this.left()) : AbortSignal.any([this.#timeout(this.left()), this.options.signal]);
  }

  /** Why a wait for a turn ended: the caller's signal (CANCELLED), else the time ran out. */
  noTurn(why: string): GdrpcError {
    const signal = this.options.signal;
    if (signal?.aborted === true) return GdrpcError.from(signal.reason, Code.CANCELLED);
    return new GdrpcError(Code.UNAVAILABLE, `no turn to connect to ${this.host}:${this.port} within ${this.options.timeoutMs} ms: ${why} (docs/wire.md "Handshake and admission")`);
  }

  /** The handshake ended: no timer outlives it. */
  clear(): void {
    for (const timer of this.#timers) clearTimeout(timer);
  }

  #timeout(ms: number): AbortSignal {
    const controller = new AbortController();
    this.#timers.push(setTimeout(() => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), ms).unref());
    return controller.signal;
  }
}

/** Opens this side's window as far as the connect allows, before AUTH announces it. */
function openOwnWindow(connection: Connection, options: HandshakeOptions): void {
  // A client's own window is its runtime's to give at once: AUTH announces it. A pull's
  // connection does without: a pullAll dialled 1,000 owners' connections at a time and they
  // took the runtime's whole maxWindowBytes (a helper session's owner, 2026-12-06).
  if (options.narrowWindow !== true) connection.widenWindow();
}

/** The port awaited for this connection's HELLO is given up once the connection is gone. */
function releaseWhenGone(connection: Connection, release: () => void): void {
  if (connection.signal.aborted) release();
  else connection.signal.addEventListener('abort', release, { once: true });
}

/** What UCX 1.22 answered a connect to a port nothing listened on (on the CPU box: not
 *  connected; in a helper session's project: a reset), or to an address nothing answers. A
 *  rejection is a gdrpc server's own refusal, at its connection limits (Server #admissible). */
const NOTHING_THERE = new Set(['UCS_ERR_NOT_CONNECTED', 'UCS_ERR_CONNECTION_RESET', 'UCS_ERR_UNREACHABLE']);

/** A connect that failed before the server's HELLO says what UCX does not. From a runtime on
 *  shared memory, a reset is what a server without shared memory does to such a client at
 *  wire-up (measured on UCX 1.22, which says no more than "Connection reset by remote peer").
 *  Otherwise such a failure before HELLO (NOTHING_THERE) is most often nothing listening there,
 *  and a connect that saw no HELLO in time may have reached something that is not a gdrpc server. */
function connectFailureHint(runtime: Runtime, connection: Connection | undefined, failure: GdrpcError, address: string): GdrpcError {
  if (connection?.peerKey !== undefined) return failure;
  let hint: string | undefined;
  if (failure.ucsStatus === 'UCS_ERR_CONNECTION_RESET' && runtime.sharedMemory) hint = 'this runtime uses shared memory with peers on this host, RuntimeOptions.sharedMemory: a server without it resets such a connection';
  else if (NOTHING_THERE.has(failure.ucsStatus ?? '')) hint = `is a gdrpc server listening on ${address}?`;
  else if (failure.ucsStatus === 'UCS_ERR_REJECTED') hint = 'the server refused the connection: it holds as many as its maxConnections or maxConnectionsPerAddress allow, or it is shutting down';
  else if (failure.code === Code.UNAVAILABLE && /^no handshake from /.test(failure.rawMessage)) hint = `is ${address} a gdrpc server?`;
  if (hint === undefined) return failure;
  return new GdrpcError(failure.code, `${failure.rawMessage} (${hint})`, { cause: failure, ucsStatus: failure.ucsStatus });
}

/** `helloCame`: HELLO arrived (the turn may pass: what follows comes under this side's key).
 *  `local`: this side's address on the connection, named in AUTH and bound by its proof. */
function admit(connection: Connection, options: HandshakeOptions, helloCame: () => void, local: string | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(new GdrpcError(Code.UNAVAILABLE, `no handshake from ${connection.peer} within ${options.timeoutMs} ms`)), options.timeoutMs);
    const signal = options.signal;
    const onAbort = (): void => fail(GdrpcError.from(signal!.reason, Code.CANCELLED));
    signal?.addEventListener('abort', onAbort, { once: true });
    /** Ends the wait either way: the timer and the signal's listener go (a long-lived signal
     *  given to many connects kept one listener, and its connection, per connect). */
    const settle = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const fail = (error: GdrpcError): void => {
      settle();
      reject(error);
    };
    if (signal?.aborted === true) onAbort();
    connection.setHandler(admissionFrames(connection, options, helloCame, local, {
      fail,
      admitted: () => {
        settle();
        connection.admitted = true;
        // The connection's lanes are open by now: not for the programs this process starts.
        closeUcxDescriptorsOnExec();
        resolve();
      },
    }));
    connection.liveness.start(options.timeoutMs);
  });
}

/** What the connection reads while admit waits: HELLO (answered with AUTH), READY, or a refusal. */
function admissionFrames(connection: Connection, options: HandshakeOptions, helloCame: () => void, local: string | undefined, { fail, admitted }: AdmissionEnd): FrameHandler {
  /** HELLO's window, once it came: READY may widen it. */
  let announced: { win: number; wmax: number } | undefined;
  return {
    frame(frame) {
      if (frame.kind === FrameKind.Hello && connection.peerKey === undefined) {
        const hello = frame.body;
        connection.peerKey = new ConnectionKey(hello.key);
        helloCame();
        connection.peerLimits = peerLimits(connection.runtime, hello);
        const refusal = windowRefusal(hello.win, hello.wmax);
        if (refusal !== undefined) {
          fail(new GdrpcError(Code.UNAVAILABLE, `${connection.peer} announced ${refusal}`));
          return;
        }
        connection.openPeerWindow(hello.win!, hello.wmax);
        announced = { win: hello.win!, wmax: hello.wmax ?? hello.win! };
        const auth = authAnswering(connection, hello, options, local);
        const livenessMs = Math.min(options.livenessMs, hello.live || options.livenessMs);
        connection.liveness.start(livenessMs);
        connection.send(FrameKind.Auth, 0, auth).catch((error) => fail(GdrpcError.from(error, Code.UNAVAILABLE)));
      } else if (frame.kind === FrameKind.Ready && announced !== undefined) {
        // READY may widen the window HELLO announced, up to its `wmax`, never narrow it.
        const win = frame.body.win;
        if (win !== undefined && (win < announced.win || win > announced.wmax)) {
          fail(new GdrpcError(Code.UNAVAILABLE, `${connection.peer} announced a message window of ${win} bytes in READY (from HELLO's ${announced.win} to its \`wmax\` ${announced.wmax})`));
          return;
        }
        if (win !== undefined) connection.widenPeerWindow(win);
        // Once: a second READY (a helper session's server sent one after the first, in the
        // same message) widened the window again.
        announced = undefined;
        admitted();
      } else if (frame.kind === FrameKind.Error) {
        const code = isCode(frame.body.code) ? frame.body.code : Code.UNAUTHENTICATED;
        fail(new GdrpcError(code, `${connection.peer} refused admission: ${frame.body.msg}`));
      }
    },
    malformed(_kind, _call, error) { fail(error); },
    closed(error) { fail(error); },
  };
}

/** How admit's wait ends: `fail` refuses or gives up, `admitted` once READY came. */
interface AdmissionEnd { fail(error: GdrpcError): void; admitted(): void }

/** What the server's HELLO says of it: its limits, and what it reads of this runtime's own. */
function peerLimits(runtime: Runtime, hello: FrameBody<FrameKind.Hello>): PeerLimits {
  const describes = runtime.describes;
  return { maxFrame: hello.maxFrame, maxTensor: hello.maxTensor, inline: hello.inline, gpu: hello.gpu === true, stages: hello.stg === true, reports: describes && hello.rep === true, batchedReports: describes && hello.rep === true && hello.rpt === true, gathers: runtime.gathers && hello.gat === true };
}

/** The AUTH that answers `hello`: this side's key, limits and window, and the proof when HELLO
 *  challenged and this side has a token. */
function authAnswering(connection: Connection, hello: FrameBody<FrameKind.Hello>, options: HandshakeOptions, local: string | undefined): FrameBody<FrameKind.Auth> {
  const auth: FrameBody<FrameKind.Auth> = { key: connection.key.value, live: options.livenessMs, gpu: cudaReceives(), maxFrame: DEFAULT_FRAME_BYTES, win: connection.openingWindow, wmax: connection.wholeWindow, rwin: true };
  if (connection.runtime.gathers) auth.gat = true;
  if (connection.runtime.stagesCudaReceives) auth.stg = true;
  if (connection.runtime.describes) {
    auth.rep = true;
    auth.rpt = true;
  }
  if (hello.chal !== undefined && options.token !== undefined) {
    // Bound to this side's address as the server sees it: a peer that forged this HELLO
    // with the key and challenge of its own connection to that server cannot have its
    // connection admitted by the proof (docs/security.md, "The proof").
    if (local !== undefined) auth.ca = local;
    auth.proof = authProof(options.token, hello.chal, connection.peerKey!.value, connection.key.value, local);
  }
  return auth;
}
