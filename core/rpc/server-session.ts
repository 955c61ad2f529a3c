// One connection from the server's side: admission (HELLO, AUTH, READY), then routing of call
// frames to ServerCalls, limits, and the teardown of its calls when the connection goes.
import { Code, GdrpcError } from '../errors.ts';
import { PoolShare } from '../tensor/index.ts';
import { encodeFrame } from '../wire/codec.ts';
import { FrameKind } from '../wire/frames.ts';
import { packMessage } from '../wire/message.ts';
import { ConnectionKey, controlTag, HELLO_KEY } from '../wire/tag.ts';
import { newChallenge, verifyProof } from './auth.ts';
import { cudaReceives } from './movers/memory.ts';
import { stagesCudaReceives } from './movers/staging.ts';
import type { Connection } from './connection.ts';
import { CallScope } from './deadline.ts';
import { ServerCall, type CallEnvironment, type MethodEntry } from './server-call.ts';
import { errorFrame } from './status.ts';
import { refuseRaw, type SendPolicy } from './transfer.ts';

/** What a session needs from its server. */
export interface SessionHost {
  readonly token: string | undefined;
  readonly livenessMs: number;
  /** A connection that has not completed admission by then is closed. */
  readonly admissionTimeoutMs: number;
  readonly limits: { maxFrame: number; maxTensor: number; inline: number; perConnection: number; poolBytesPerConnection: number };
  readonly env: CallEnvironment;
  readonly shuttingDown: boolean;
  lookup(service: string, method: string): MethodEntry | undefined;
  /** Takes a slot of the global concurrency limit; false when none is free. */
  acquireCall(): boolean;
  releaseCall(): void;
  ready(session: ServerSession): void;
  closed(session: ServerSession, error: GdrpcError): void;
  error(error: GdrpcError): void;
}

/** How long a refused connection stays open for its ERROR frame to be read. */
const REFUSAL_LINGER_MS = 200;

export class ServerSession {
  readonly calls = new Map<number, ServerCall>();
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
      frame: (kind, call, body) => this.#frame(kind, call, body),
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
    const hello: Record<string, unknown> = { key: connection.key.value, maxFrame: host.limits.maxFrame, maxTensor: host.limits.maxTensor, inline: host.limits.inline, live: host.livenessMs, gpu: cudaReceives() };
    if (this.#challenge !== undefined) hello.chal = this.#challenge;
    if (stagesCudaReceives(connection.runtime.context)) hello.stg = true;
    connection.sendRaw(controlTag(HELLO_KEY), packMessage([{ kind: FrameKind.Hello, call: 0, body: encodeFrame(hello) }])).catch(() => connection.close());
  }

  get admitted(): boolean { return this.connection.admitted; }
  get peer(): string { return this.connection.peer; }

  /** Tells the client to start no new calls here (shutdown). */
  goAway(): void {
    if (this.connection.admitted && this.connection.isOpen) this.connection.send(FrameKind.GoAway, 0, {}).catch(() => {});
  }

  #frame(kind: FrameKind, call: number, body: Record<string, unknown>): void {
    if (this.#closing) return;
    if (!this.connection.admitted) {
      if (kind === FrameKind.Auth) this.#auth(body);
      else this.connection.close(new GdrpcError(Code.UNAUTHENTICATED, `frame ${FrameKind[kind]} before admission`));
      return;
    }
    switch (kind) {
      case FrameKind.Request: return this.#request(call, body);
      case FrameKind.Cancel: {
        const existing = this.calls.get(call);
        if (existing !== undefined) {
          existing.cancelledByPeer = true;
          existing.scope.abort(body.code === Code.DEADLINE_EXCEEDED
            ? new GdrpcError(Code.DEADLINE_EXCEEDED, 'deadline exceeded (client)')
            : new GdrpcError(Code.CANCELLED, 'cancelled by the client'));
        }
        return;
      }
      case FrameKind.StreamItem: {
        const existing = this.calls.get(call);
        if (existing !== undefined) existing.item(body);
        else void refuseRaw({ connection: this.connection, call }, body.a);
        return;
      }
      case FrameKind.StreamEnd: return this.calls.get(call)?.end();
      case FrameKind.Credit: return this.calls.get(call)?.credit(body.n as number);
      default:
        this.#malformed(kind, call, new GdrpcError(Code.INVALID_ARGUMENT, `unexpected ${FrameKind[kind]} frame from a client`));
    }
  }

  #auth(body: Record<string, unknown>): void {
    const clientKey = new ConnectionKey(body.key as bigint);
    this.connection.peerKey = clientKey;
    if (this.host.token !== undefined && !verifyProof(this.host.token, this.#challenge!, this.connection.key.value, clientKey.value, body.proof as Uint8Array | undefined)) {
      const error = new GdrpcError(Code.UNAUTHENTICATED, body.proof === undefined ? 'this server requires a token' : 'wrong token');
      this.host.error(new GdrpcError(Code.UNAUTHENTICATED, `${this.peer}: ${error.rawMessage}`));
      this.#refuseAndClose(error);
      return;
    }
    this.connection.admitted = true;
    clearTimeout(this.#admissionTimer);
    this.connection.peerLimits = { ...this.connection.peerLimits, gpu: body.gpu === true, stages: body.stg === true };
    // Results may now be inline by the caller's choice: keep them within the client's receive buffer.
    if (typeof body.maxFrame === 'number' && Number.isSafeInteger(body.maxFrame) && body.maxFrame > 0) this.connection.peerLimits.maxFrame = body.maxFrame;
    const peerLive = typeof body.live === 'number' && body.live > 0 ? body.live : this.host.livenessMs;
    this.connection.liveness.start(Math.min(this.host.livenessMs, peerLive));
    this.connection.send(FrameKind.Ready, 0, {}).then(() => this.host.ready(this), () => {});
  }

  /** ERROR (call 0), then a close a little later: closing at once could make the client see the
   *  disconnect before it has read why. */
  #refuseAndClose(error: GdrpcError): void {
    this.#closing = true;
    this.connection.send(FrameKind.Error, 0, errorFrame(error)).catch(() => {});
    setTimeout(() => this.connection.close(error, { graceful: true }), REFUSAL_LINGER_MS).unref();
  }

  #request(id: number, body: Record<string, unknown>): void {
    const scope = { connection: this.connection, call: id };
    const refuse = (error: GdrpcError): void => {
      void refuseRaw(scope, body.a);
      this.connection.send(FrameKind.Error, id, errorFrame(error)).catch(() => {});
    };
    if (id === 0 || this.calls.has(id)) return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `call id ${id} is ${id === 0 ? 'reserved' : 'already in use'}`));
    // Not run: the client may retry it elsewhere or on a fresh connection.
    if (this.host.shuttingDown) return refuse(new GdrpcError(Code.UNAVAILABLE, 'server is shutting down', { details: { unprocessed: true } }));
    const entry = this.host.lookup(body.svc as string, body.m as string);
    if (entry === undefined) return refuse(new GdrpcError(Code.NOT_FOUND, `unknown method ${String(body.svc)}/${String(body.m)}`));
    if (entry.method.clientStreaming !== (body.a === undefined)) {
      return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `${entry.method.name} is ${entry.method.clientStreaming ? '' : 'not '}client-streaming`));
    }
    const policy = policyOf(body);
    if (policy === undefined) return refuse(new GdrpcError(Code.INVALID_ARGUMENT, `bad mover ${JSON.stringify(body.mv)} or noStaging ${JSON.stringify(body.ns)} in REQUEST`));
    // Over capacity: refused at once, unrun, and the caller may retry after a while.
    if (this.calls.size >= this.host.limits.perConnection) {
      return refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, `more than ${this.host.limits.perConnection} calls in flight on this connection (ServerOptions.maxCallsPerConnection)`, { details: { retryable: true, limit: 'maxCallsPerConnection' } }));
    }
    if (!this.host.acquireCall()) {
      return refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, 'server is at its concurrent call limit (ServerOptions.maxCalls)', { details: { retryable: true, limit: 'maxCalls' } }));
    }
    const deadline = typeof body.to === 'number' ? Date.now() + body.to : undefined;
    // No parent signal: the session aborts its calls itself when the connection goes.
    const callScope = new CallScope(deadline);
    const call = new ServerCall(id, this.connection, entry, callScope, (body.md as Record<string, string> | undefined) ?? {}, this.#env, policy);
    if (typeof body.win === 'number') call.openWindow(body.win);
    this.calls.set(id, call);
    void call.run(body.a as Record<string, unknown> | undefined).finally(() => {
      this.calls.delete(id);
      this.host.releaseCall();
    });
  }

  #malformed(kind: number, call: number, error: GdrpcError): void {
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
 *  allowed); undefined when either field is malformed. */
function policyOf(body: Record<string, unknown>): SendPolicy | undefined {
  const mover = body.mv ?? 'auto';
  const noStaging = body.ns ?? false;
  if (mover !== 'auto' && mover !== 'inline' && mover !== 'tag' && mover !== 'rma') return undefined;
  if (typeof noStaging !== 'boolean') return undefined;
  return { mover, noStaging };
}
