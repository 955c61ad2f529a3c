// The client half of the handshake (docs/wire.md "Handshake and admission"): wait for HELLO on
// the new endpoint, answer AUTH (with the HMAC proof when challenged), wait for READY.
import { Endpoint } from '../ucx/index.ts';
import { Code, GdrpcError, isCode } from '../errors.ts';
import { encodeFrame } from '../wire/codec.ts';
import { FrameKind } from '../wire/frames.ts';
import { controlTag } from '../wire/tag.ts';
import { authProof } from './auth.ts';
import { cudaReceives } from './movers/memory.ts';
import { stagesCudaReceives } from './movers/staging.ts';
import { Connection, type FrameHandler } from './connection.ts';
import type { FrameSink } from './dispatcher.ts';
import { DEFAULT_FRAME_BYTES, type Runtime } from './runtime.ts';

export interface HandshakeOptions { token?: string; livenessMs: number; timeoutMs: number; name?: string }

/** Connects to host:port and completes admission; the connection comes back ready for calls. */
export async function connectAndAdmit(runtime: Runtime, host: string, port: number, options: HandshakeOptions): Promise<Connection> {
  // Only one outgoing handshake per worker at a time: HELLO carries no hint of which endpoint it
  // came from (UCX tag matching does not say), so the one pending endpoint is the one it is for.
  const forward: FrameSink & { target?: Connection } = {
    onFrame(kind, call, bytes) { this.target?.onFrame(kind, call, bytes); },
    onOversized(kind, call, length) { this.target?.onOversized(kind, call, length); },
  };
  const endTurn = await runtime.dispatcher.awaitHelloTurn(forward);
  let connection: Connection | undefined;
  try {
    const endpoint = Endpoint.connect(runtime.worker, { host, port, name: options.name ?? 'gdrpc-client' });
    connection = new Connection(runtime, endpoint, options.livenessMs);
    forward.target = connection;
    await admit(connection, options);
    return connection;
  } catch (error) {
    const failure = GdrpcError.from(error, Code.UNAVAILABLE);
    connection?.close(failure);
    throw failure;
  } finally {
    endTurn();
  }
}

function admit(connection: Connection, options: HandshakeOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(new GdrpcError(Code.UNAVAILABLE, `no handshake from ${connection.peer} within ${options.timeoutMs} ms`)), options.timeoutMs);
    const fail = (error: GdrpcError): void => { clearTimeout(timer); reject(error); };
    const handler: FrameHandler = {
      frame(kind, _call, body) {
        if (kind === FrameKind.Hello && connection.remoteId === 0) {
          connection.remoteId = body.conn as number;
          connection.peerLimits = { maxFrame: body.maxFrame as number, maxTensor: body.maxTensor as number, inline: body.inline as number, gpu: body.gpu === true, batch: body.batch === true, stages: body.stg === true };
          const challenge = body.chal as Uint8Array | undefined;
          const auth: Record<string, unknown> = { conn: connection.localId, live: options.livenessMs, gpu: cudaReceives(), batch: true, maxFrame: DEFAULT_FRAME_BYTES };
          if (stagesCudaReceives(connection.runtime.context)) auth.stg = true;
          if (challenge !== undefined && options.token !== undefined) auth.proof = authProof(options.token, challenge, connection.remoteId, connection.localId);
          const livenessMs = Math.min(options.livenessMs, (body.live as number) || options.livenessMs);
          connection.liveness.start(livenessMs);
          connection.sendRaw(controlTag(FrameKind.Auth, connection.remoteId, 0), encodeFrame(auth)).catch((error) => fail(GdrpcError.from(error, Code.UNAVAILABLE)));
        } else if (kind === FrameKind.Ready) {
          clearTimeout(timer);
          resolve();
        } else if (kind === FrameKind.Error) {
          const code = isCode(body.code) ? body.code : Code.UNAUTHENTICATED;
          fail(new GdrpcError(code, `${connection.peer} refused admission: ${String(body.msg)}`));
        }
      },
      malformed(_kind, _call, error) { fail(error); },
      closed(error) { fail(error); },
    };
    connection.setHandler(handler);
    connection.liveness.start(options.timeoutMs);
  });
}
