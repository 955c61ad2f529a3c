// The control receive buffer (core/rpc/runtime/receive-buffer.ts) as Delivery uses it: a message is
// cleared once read, in its own delivery, so the next lands in zeros and the clearing is charged to
// the connection whose message it was (a reading turn times the delivery).
import { describe, expect, it } from 'vitest';
import { Delivery } from '../../core/rpc/runtime/delivery.ts';
import { ReceiveBuffer } from '../../core/rpc/runtime/receive-buffer.ts';
import type { ConnectionTable } from '../../core/rpc/runtime/connection-table.ts';
import type { Worker } from '../../core/ucx/index.ts';

/** A Delivery whose every message goes to `onMessage` (undefined: to no connection). */
function delivery(onMessage?: (bytes: Uint8Array, length: number) => void): Delivery {
  const table = { sinkOfWords: () => (onMessage === undefined ? undefined : { onMessage }) } as unknown as ConnectionTable;
  return new Delivery({} as Worker, table);
}

const slotOf = (length: number): Uint32Array => Uint32Array.from([1, 2, length, 0]);

describe('control receive buffer', () => {
  it('a message is read in place, then cleared in its own delivery', () => {
    const buffer = new ReceiveBuffer(64);
    const seen: number[][] = [];
    const deliver = delivery((bytes, length) => seen.push([...bytes.subarray(0, length)]));
    buffer.bytes.fill(7, 0, 40);
    deliver.deliver(buffer, slotOf(40));
    expect(seen).toEqual([Array(40).fill(7)]);
    expect(buffer.bytes.every((byte) => byte === 0)).toBe(true);
    // A shorter message after it lands in zeros: nothing of the first is past its end.
    buffer.bytes.fill(9, 0, 10);
    let past: number[] = [];
    delivery((bytes, length) => { past = [...bytes.subarray(length, 40)]; }).deliver(buffer, slotOf(10));
    expect(past).toEqual(Array(30).fill(0));
  });

  it('a message of no connection, and one whose connection threw, are cleared too', () => {
    const buffer = new ReceiveBuffer(32);
    buffer.bytes.fill(5, 0, 20);
    delivery().deliver(buffer, slotOf(20));
    expect(buffer.bytes.every((byte) => byte === 0)).toBe(true);
    buffer.bytes.fill(6, 0, 20);
    delivery(() => { throw new Error('listener broke'); }).deliver(buffer, slotOf(20));
    expect(buffer.bytes.every((byte) => byte === 0)).toBe(true);
  });

  it('after a truncated receive (UCX may have written anywhere) the next message finds zeros past its end', () => {
    const buffer = new ReceiveBuffer(32);
    buffer.bytes.fill(3);
    buffer.spoiled();
    let past: number[] = [];
    buffer.bytes.fill(4, 0, 8);
    delivery((bytes, length) => { past = [...bytes.subarray(length)]; }).deliver(buffer, slotOf(8));
    expect(past).toEqual(Array(24).fill(0));
  });
});
