// RMA pull mover: the sender exposes {address, rkey} of memory it keeps unchanged; the receiver
// reads it with ucp_get into its own buffer and sends FIN; the sender then releases it. This is
// the mover behind remote tensor handles, where the reader decides when (and whether) to read.
import { RemoteKey } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import type { Tensor } from '../../tensor/index.ts';
import { FrameKind, type TensorWire } from '../../wire/frames.ts';
import type { Mover, Outgoing, ProtocolSeen, TransferScope } from './mover.ts';
import { mappedSpan } from './memory.ts';
import { memoryTypeOf } from '../runtime/memory-support.ts';

export const rmaMover: Mover = {
  name: 'rma',

  prepare(tensor: Tensor, { connection, call }: TransferScope): Outgoing {
    if (!connection.runtime.rma) throw rmaDisabled();
    const { span, release } = mappedSpan(tensor, connection.runtime.context, connection.runtime.stats);
    let done!: () => void;
    const released = new Promise<void>((resolve) => { done = resolve; });
    const x = connection.exposures.add(call, () => { release(); done(); });
    const wire: TensorWire = {
      dt: tensor.dtype, sh: [...tensor.shape], n: tensor.byteLength, mt: memoryTypeOf(tensor), m: 'r', x,
      a: span.region.address + BigInt(span.offset), k: packedRkey(span.region),
    };
    return { wire, start: () => released };
  },

  async receive(wire: TensorWire, dest: Tensor, { connection, call }: TransferScope): Promise<ProtocolSeen | void> {
    // A peer's rkey is never unpacked unless this process opted into RMA: UCX trusts its bytes.
    if (!connection.runtime.rma) {
      sendFin(wire, connection, call);
      throw new GdrpcError(Code.INVALID_ARGUMENT, 'RMA descriptor refused: this process does not perform RMA (GDRPC_UNSAFE_RMA unset; docs/security.md)');
    }
    const { span, release } = mappedSpan(dest, connection.runtime.context, connection.runtime.stats);
    let rkey: RemoteKey | undefined;
    try {
      rkey = RemoteKey.unpack(connection.endpoint, wire.k!);
      // The reader runs the get: UCX's description of it is the truth about this transfer.
      return await connection.endpoint.get(span, wire.a!, rkey, { describe: connection.runtime.describes });
    } catch (error) {
      throw connection.closedError ?? GdrpcError.from(error, Code.UNAVAILABLE);
    } finally {
      rkey?.close();
      release();
      sendFin(wire, connection, call);
    }
  },

  async refuse(wire: TensorWire, { connection, call }: TransferScope): Promise<void> {
    sendFin(wire, connection, call);
  },
};

function rmaDisabled(): GdrpcError {
  return new GdrpcError(Code.FAILED_PRECONDITION, 'the rma mover is disabled: it would expose this process\'s memory to every peer (set GDRPC_UNSAFE_RMA=1 only among trusted peers; docs/security.md)');
}

function sendFin(wire: TensorWire, connection: TransferScope['connection'], call: number): void {
  if (!connection.isOpen) return;
  connection.send(FrameKind.Fin, call, { x: wire.x! }).catch(() => { /* peer gone: it releases on its own */ });
}

// Packing an rkey costs a native call and an allocation; pool regions are packed once.
const packed = new WeakMap<object, Uint8Array>();
function packedRkey(region: { packRkey(): Uint8Array }): Uint8Array {
  let bytes = packed.get(region);
  if (bytes === undefined) {
    bytes = region.packRkey();
    packed.set(region, bytes);
  }
  return bytes;
}
