// Turning away the tensor payloads of a frame this side will not take (refused, malformed, or for a
// call that is over): whatever the peer sent is walked for anything shaped like a descriptor, and
// each payload it announced is matched into one byte (or its exposure released), so that the
// sender completes and nothing waits for bytes no one takes.
import { MAX_TENSORS_PER_FRAME, type TensorWire } from '../../wire/frames.ts';
import { moverByName } from '../movers/choose.ts';
import type { TransferScope } from '../movers/mover.ts';
import { MAX_TRANSFER_ID, tooManyTensors } from './transfer.ts';

/** The placeholders of a decoded frame whose descriptors arrived, even if decoding failed midway. */
export function refuseRaw(scope: TransferScope, wireObject: unknown): Promise<void> {
  // A frame rejected before decoding still announced tag payloads and exposures: settle them so
  // that the sender completes. Walk generically for anything shaped like a descriptor.
  // A loop over a stack of its own, not recursion: a peer chooses the nesting (a frame nested as
  // deep as the decoder allows would overflow a recursive walk's stack).
  const found: TensorWire[] = [];
  const stack: unknown[] = [wireObject];
  while (stack.length > 0 && found.length <= MAX_TENSORS_PER_FRAME) {
    const value = stack.pop();
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i -= 1) stack.push(value[i]);
    } else if (typeof value === 'object' && value !== null && !(value instanceof Uint8Array)) {
      const record = value as Record<string, unknown>;
      if ((record.m === 't' || record.m === 'g' || record.m === 'r') && typeof record.x === 'number') {
        // An id no payload tag can carry names no payload: nothing to turn away.
        if (record.m === 'r' || record.x <= MAX_TRANSFER_ID) found.push(record as unknown as TensorWire);
      } else {
        const values = Object.values(record);
        for (let i = values.length - 1; i >= 0; i -= 1) stack.push(values[i]);
      }
    }
  }
  const { connection } = scope;
  if (connection.refusing + found.length > MAX_TENSORS_PER_FRAME) {
    // More than any frame may carry, or than refused frames may have outstanding together: the
    // connection goes (its payloads are then dropped as those of no connection) instead of a
    // receive posted and held for each.
    const what = found.length > MAX_TENSORS_PER_FRAME ? `${connection.peer} sent a frame for call ${scope.call}` : `${connection.peer}'s refused frames, together,`;
    connection.close(tooManyTensors(what));
    return Promise.resolve();
  }
  // The tensors of a gather share one payload: a payload id is refused once, whatever claims it.
  const payloads = new Set<number>();
  const refusals = found.filter((wire) => {
    if (wire.m === 'r') return true;
    if (payloads.has(wire.x!)) return false;
    payloads.add(wire.x!);
    return true;
  });
  for (const wire of refusals) if (wire.m !== 'r') connection.reports.forget(wire.x!);
  // Across the runtime too (runtime/refusals.ts): past its limit the connection turning away the
  // most is closed, perhaps this one.
  const { refusals: count } = connection.runtime;
  if (!count.begin(connection, refusals.length)) return Promise.resolve();
  connection.refusing += refusals.length;
  const settled = (): void => {
    connection.refusing -= 1;
    count.settled(connection, connection.refusing);
  };
  return Promise.all(refusals.map((wire) => moverByName(wire.m === 'r' ? 'rma' : 'tag').refuse(wire, scope).finally(settled))).then(() => undefined);
}
