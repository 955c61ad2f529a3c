// One connection from the server's side: admission (HELLO, AUTH, READY), then routing of call
// frames to ServerCalls, limits, and the teardown of its calls when the connection goes.
import { Code, GdrpcError } from '../../errors.ts';
import { PoolShare } from '../../tensor/index.ts';
import { encodeFrame } from '../../wire/codec.ts';
import { FrameKind, type Frame, type FrameBody } from '../../wire/frames.ts';
import { packMessage } from '../../wire/message.ts';
import { ConnectionKey, controlTag, HELLO_KEY, helloKey } from '../../wire/tag.ts';
import { newChallenge, verifyProof } from '../connection/auth.ts';
import { cudaReceives } from '../runtime/memory-support.ts';
import type { Connection } from '../connection/connection.ts';
import { closeUcxDescriptorsOnExec, portOf } from '../../ucx/index.ts';
import { windowRefusal } from '../connection/window.ts';
import { CallScope } from '../call/deadline.ts';
import { ServerCall, type CallEnvironment, type MethodEntry } from './server-call.ts';
import { errorFrame } from '../call/status.ts';
import type { SendPolicy } from '../transfer/transfer.ts';
import { refuseRaw } from '../transfer/refuse.ts';
import { IdTable } from '../../live-list.ts';

/** What a session needs from its server. */
export interface SessionHost {
  readonly token: string | undefined;
  /** With a token, proofs must name the client's address (ServerOptions.requireClientAddress). */
  readonly requireClientAddress: boolean;
  readonly livenessMs: number;
  /** A connection that has not completed admission by then is closed. */
  readonly admissionTimeoutMs: number;
  readonly limits: { maxFrame: number; maxTensor: number; inline: number; perConnection: number; poolBytesPerConnection: number };
  readonly env: CallEnvironment;
  readonly shuttingDown: boolean;
  lookup(service: string, method: string): MethodEntry | undefined;
  /** Takes a slot of the server's concurrency limits for a call from `peer` whose REQUEST body
   *  decoded to `weight` (plain.ts); why not, when none is free (maxCalls, maxCallsPerAddress,
   *  maxArgumentBytes). */
  acquireCall(peer: string, weight: number): GdrpcError | undefined;
  releaseCall(peer: string, weight: number): void;
  ready(session: ServerSession): void;
  closed(session: ServerSession, error: GdrpcError): void;
  error(error: GdrpcError): void;
}

/** How long a refused connection stays open for its ERROR frame to be read, once it is sent. */
const REFUSAL_LINGER_MS = 200;
/** How long a refused connection's ERROR may take to be sent before the connection is closed anyway. */
const REFUSAL_SEND_WAIT_MS = 2000;

export class ServerSession {
  /** Calls in flight by id (an IdTable, not a Map: core/live-list.ts says why). */
  readonly calls = new IdTable<ServerCall>();
  /** Handlers of this connection's calls that ended without them (outliving): still running. */
  #outliving = 0;
  /** Refused: ignore everything until the connection closes. */
  #closing = false;
  readonly #challenge: Uint8Array | undefined;
  #admissionTimer: NodeJS.Timeout | undefined;
  /** The server's call environment with this connection's pool share. */
  readonly #env: CallEnvironment;

  constructor(readonly connection: Connection, private readonly host: SessionHost) {
    this.#env = { ...host.env, share: new PoolShare(host.limits.poolBytesPerConnection) };
    this.#challenge = host.token !== undefined ? newChallenge() : undefined;
    connection.frameLimit = host.limits.maxFrame;
    connection.inlineBytes = host.limits.inline;
    connection.setHandler({
      frame: (frame) => this.#frame(frame),
      malformed: (kind, call, error) => this.#malformed(kind, call, error),
      closed: (error) => {
        clearTimeout(this.#admissionTimer);
        for (const call of this.calls.values()) call.scope.abort(error);
        host.closed(this, error);
      },
    });
    connection.liveness.start(host.livenessMs);
    // Admission has a deadline of its own that no frame extends (KEEPALIVE included): a peer that
    // never proves the token holds a connection slot for this long at most.
    this.#admissionTimer = setTimeout(() => {
      connection.close(new GdrpcError(Code.UNAUTHENTICATED, `${this.peer} did not complete admission within ${host.admissionTimeoutMs} ms`));
    }, host.admissionTimeoutMs);
    this.#admissionTimer.unref();
    const hello: FrameBody<FrameKind.Hello> = { key: connection.key.value, maxFrame: host.limits.maxFrame, maxTensor: host.limits.maxTensor, inline: host.limits.inline, live: host.livenessMs, gpu: cudaReceives(), win: connection.openingWindow, wmax: connection.wholeWindow };
    const clientPort = portOf(connection.peer);
    if (clientPort !== undefined) hello.cp = clientPort;
    if (this.#challenge !== undefined) hello.chal = this.#challenge;
    if (connection.runtime.stagesCudaReceives) hello.stg = true;
    if (connection.runtime.describes) {
      hello.rep = true;
      hello.rpt = true;
    }
    if (connection.runtime.gathers) hello.gat = true;
    // Under key 0 for a client that takes HELLOs in turns (its UCX does not tell its address, or
    // it is older than `cp`), then under the key of the client's port, which the client reads as
    // that connection's alone. In that order (UCX keeps the order of one endpoint's tag
    // messages): a client on that port drops the key-0 copy while it still waits for its HELLO.
    // The client reads one of them: the window counts one.
    const message = packMessage([{ kind: FrameKind.Hello, call: 0, body: encodeFrame(FrameKind.Hello, hello) }]);
    // The connection's sockets, the one it came on and the lane HELLO opened, are not for the
    // programs this process starts while it waits for admission (a helper session's child kept
    // two of a connection that never sent AUTH, after the server was gone).
    closeUcxDescriptorsOnExec();
    connection.sendRaw(controlTag(HELLO_KEY), message).then(() => { closeUcxDescriptorsOnExec(); }, () => connection.close());
    if (clientPort !== undefined) connection.sendRaw(controlTag(helloKey(clientPort)), message, false).catch(() => connection.close());
  }

  get admitted(): boolean { return this.connection.admitted; }
  get peer(): string { return this.connection.peer; }

  /** Tells the client to start no new calls here (shutdown). */
  goAway(): void {
    if (this.connection.admitted && this.connection.isOpen) this.connection.send(FrameKind.GoAway, 0, {}).catch(() => {});
  }

  /** Routes a call frame; returns the error of a kind a client never sends (the connection
   *  reports it as malformed, and counts it). */
  #frame(frame: Frame): GdrpcError | undefined {
    if (this.#closing) return undefined;
    const { call } = frame;
    if (!this.connection.admitted) {
      if (frame.kind === FrameKind.Auth) this.#auth(frame.body);
      else this.connection.close(new GdrpcError(Code.UNAUTHENTICATED, `frame ${FrameKind[frame.kind]} before admission`));
      return undefined;
    }
    switch (frame.kind) {
      case FrameKind.Request:
        this.#request(call, frame.body, frame.weight ?? 0);
        return undefined;
      case FrameKind.Cancel: {
        const existing = this.calls.get(call);
        if (existing !== undefined) {
          existing.cancelledByPeer = true;
          existing.scope.abort(frame.body.code === Code.DEADLINE_EXCEEDED
            ? new GdrpcError(Code.DEADLINE_EXCEEDED, 'deadline exceeded (client)')
            : new GdrpcError(Code.CANCELLED, 'cancelled by the client'));
        }
        return undefined;
      }
      case FrameKind.StreamItem: {
        const existing = this.calls.get(call);
        if (existing !== undefined) existing.item(frame.body, frame.weight ?? 0);
        else void refuseRaw({ connection: this.connection, call }, frame.body.a);
        return undefined;
      }
      case FrameKind.StreamEnd:
        this.calls.get(call)?.end();
        return undefined;
      case FrameKind.Credit:
        this.calls.get(call)?.credit(frame.body.n, frame.body.b);
        return undefined;
      default:
        return new GdrpcError(Code.INVALID_ARGUMENT, `unexpected ${FrameKind[frame.kind]} frame from a client`);
    }
  }

  #auth(body: FrameBody<FrameKind.Auth>): void {
    const clientKey = new ConnectionKey(body.key);
    this.connection.peerKey = clientKey;
    if (this.host.token !== undefined) {
      // The proof binds the client's address (`ca`): one for another connection's address came
      // from a client whose HELLO a peer forged with the key and challenge of its own connection
      // (docs/security.md "The proof is bound ..."). Checked once the proof holds, so that the
      // address the message names is one a client that knows the token wrote.
      let refusal: string | undefined;
      if (!verifyProof(this.host.token, this.#challenge!, this.connection.key.value, clientKey.value, body.proof, body.ca)) refusal = body.proof === undefined ? 'this server requires a token' : 'wrong token';
      else if (body.ca === undefined && this.host.requireClientAddress) refusal = 'this server requires a proof bound to the client\'s address (AUTH `ca`), which this client does not send: its UCX does not tell its address, or it is a gdrpc from before it (ServerOptions.requireClientAddress)';
      else if (body.ca !== undefined && body.ca !== this.peer) refusal = `the proof names client ${body.ca.slice(0, 64)}, and this connection comes from ${this.peer} (a proof relayed from another connection, or address translation between client and server)`;
      if (refusal !== undefined) {
        const error = new GdrpcError(Code.UNAUTHENTICATED, refusal);
        this.host.error(new GdrpcError(Code.UNAUTHENTICATED, `${this.peer}: ${error.rawMessage}`));
        this.#refuseAndClose(error);
        return;
      }
    }
    const refusal = windowRefusal(body.win, body.wmax);
    if (refusal !== undefined) {
      this.#refuseAndClose(new GdrpcError(Code.INVALID_ARGUMENT, refusal));
      return;
    }
    this.connection.admitted = true;
    // The connection's lanes are open by now: not for the programs this process starts.
    closeUcxDescriptorsOnExec();
    clearTimeout(this.#admissionTimer);
    this.connection.peerLimits = { ...this.connection.peerLimits, gpu: body.gpu === true, stages: body.stg === true, reports: this.connection.runtime.describes && body.rep === true, batchedReports: this.connection.runtime.describes && body.rep === true && body.rpt === true, gathers: this.connection.runtime.gathers && body.gat === true };
    // Results may now be inline by the caller's choice: keep them within the client's receive buffer.
    if (body.maxFrame !== undefined && body.maxFrame > 0) this.connection.peerLimits.maxFrame = body.maxFrame;
    this.connection.openPeerWindow(body.win!, body.wmax);
    const peerLive = body.live !== undefined && body.live > 0 ? body.live : this.host.livenessMs;
    this.connection.liveness.start(Math.min(this.host.livenessMs, peerLive));
    // The opening window is taken from the runtime's budget now, not when the connection came:
    // peers that never prove the token hold none of it (docs/security.md item 4). A client that
    // does not take READY's `win` keeps HELLO's: widened here alone, this side would credit it a
    // quarter of a window it never knew of, and its messages would wait for that for ever.
    const ready: FrameBody<FrameKind.Ready> = {};
    if (body.rwin === true) ready.win = this.connection.widenWindow();
    this.connection.send(FrameKind.Ready, 0, ready).then(() => this.host.ready(this), () => {});
  }

  /** ERROR (call 0), then a close a little later: closing at once could make the client see the
   *  disconnect before it has read why. The close is forced once the ERROR is sent: a graceful one
   *  waits for the peer to answer UCX's disconnect, and a peer that stopped never does, so every
   *  connection refused to such a peer kept its endpoint and two sockets open until the runtime
   *  closed (a helper session's stopped attacker held 2,000 descriptors of a server, after
   *  those connections had left the caps). */
  #refuseAndClose(error: GdrpcError): void {
    this.#closing = true;
    const sent = this.connection.send(FrameKind.Error, 0, errorFrame(error)).catch(() => {});
    const timers: NodeJS.Timeout[] = [];
    const after = (ms: number): Promise<void> => new Promise((resolve) => { timers.push(setTimeout(resolve, ms).unref()); });
    // A send a peer's full window holds back is not waited for past REFUSAL_SEND_WAIT_MS. Both
    // timers go once the close is made: a flood of refusals holds no connection for the longer.
    void Promise.race([Promise.all([sent, after(REFUSAL_LINGER_MS)]), after(REFUSAL_SEND_WAIT_MS)])
      .then(() => {
        for (const timer of timers) clearTimeout(timer);
        this.connection.close(error, { graceful: false });
      });
  }

  #request(id: number, body: FrameBody<FrameKind.Request>, weight: number): void {
    const scope = { connection: this.connection, call: id };
    const refuse = (error: GdrpcError): void => {
      void refuseRaw(scope, body.a);
      this.connection.send(FrameKind.Error, id, errorFrame(error)).catch(() => {});
    };
    // Call id 0 names the connection, not a call (docs/wire.md): the frame cannot be tied to a
    // call, so the connection is refused as a whole, its payloads turned away first.
    if (id === 0) {
      void refuseRaw(scope, body.a);
      return this.#refuseAndClose(new GdrpcError(Code.INVALID_ARGUMENT, 'a REQUEST on call id 0 (reserved for the connection)'));
    }
    if (this.calls.has(id)) return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `call id ${id} is already in use`));
    // Not run: the client may retry it elsewhere or on a fresh connection.
    if (this.host.shuttingDown) return refuse(new GdrpcError(Code.UNAVAILABLE, 'server is shutting down', { details: { unprocessed: true } }));
    const entry = this.host.lookup(body.svc, body.m);
    if (entry === undefined) return refuse(new GdrpcError(Code.NOT_FOUND, `unknown method ${body.svc}/${body.m}`));
    if (entry.method.clientStreaming !== (body.a === undefined)) {
      return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `${entry.method.name} is ${entry.method.clientStreaming ? '' : 'not '}client-streaming`));
    }
    const policy = policyOf(body);
    if (policy === undefined) return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `bad mover ${JSON.stringify(body.mv)} in REQUEST`));
    // Over capacity: refused at once, unrun, and the caller may retry after a while.
    if (this.calls.size + this.#outliving >= this.host.limits.perConnection) {
      return refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, `more than ${this.host.limits.perConnection} calls in flight on this connection (ServerOptions.maxCallsPerConnection)`, { details: { retryable: true, limit: 'maxCallsPerConnection' } }));
    }
    const full = this.host.acquireCall(this.peer, weight);
    if (full !== undefined) return refuse(full);
    const deadline = body.to !== undefined ? Date.now() + body.to : undefined;
    // No parent signal: the session aborts its calls itself when the connection goes.
    const callScope = new CallScope(deadline, undefined, entry.method);
    const call = new ServerCall(id, this.connection, entry, callScope, body.md ?? {}, this.#env, policy);
    call.openWindow(body.win, body.winb);
    this.calls.set(id, call);
    void call.run(body.a, () => {
      this.calls.delete(id);
      const outliving = call.outliving;
      if (outliving === undefined) {
        this.host.releaseCall(this.peer, weight);
        return;
      }
      // Its handler runs on: it counts against this connection's limit as well as the server's,
      // so that one client cannot take every slot of maxCalls with handlers it cancelled.
      this.#outliving += 1;
      const returned = (): void => {
        this.#outliving -= 1;
        this.host.releaseCall(this.peer, weight);
      };
      void outliving.then(returned, returned);
    });
  }

  #malformed(kind: number, call: number, error: GdrpcError): void {
    // Refused already: what else the peer sends before the connection closes is not answered.
    if (this.#closing) return;
    this.host.error(new GdrpcError(error.code, `${this.peer}: ${error.rawMessage}`, { cause: error }));
    if (!this.connection.admitted || call === 0) {
      // Nothing to tie the frame to: tell the peer if we can, then drop the connection.
      if (this.connection.peerKey !== undefined) this.#refuseAndClose(error);
      else this.connection.close(error);
      return;
    }
    const existing = this.calls.get(call);
    existing?.scope.abort(error);
    if (existing !== undefined) existing.cancelledByPeer = true;
    this.connection.send(FrameKind.Error, call, errorFrame(error)).catch(() => {});
    void kind;
  }
}

/** The caller's transfer policy from a REQUEST (`mv`, `ns`; absent in old peers' frames: auto, staging
 *  allowed); undefined for a mover name this side does not know (decoding checked `ns`). */
function policyOf(body: FrameBody<FrameKind.Request>): SendPolicy | undefined {
  const mover = body.mv ?? 'auto';
  if (mover !== 'auto' && mover !== 'inline' && mover !== 'tag' && mover !== 'rma') return undefined;
  return { mover, noStaging: body.ns ?? false };
}
