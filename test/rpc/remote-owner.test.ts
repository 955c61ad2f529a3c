// The owner's table of exposed tensors (core/rpc/runtime/remote-owner.ts), without a network: every
// handle gets its own 16-byte capability (they are drawn from the OS in batches, so the test
// crosses several batches), a lookup needs the exact capability, and a released handle is gone.
import { describe, expect, it } from 'vitest';
import { Code, Tensor } from '../../core/index.ts';
import { thrown } from './fixtures/thrown.ts';
import { RemoteOwner, type OwnerServer } from '../../core/rpc/runtime/remote-owner.ts';

const listening: OwnerServer = { address: { host: '127.0.0.1', port: 4000 }, shutdown: () => Promise.resolve() };

function owner(): RemoteOwner {
  const table = new RemoteOwner();
  table.listening(listening, true);
  return table;
}

describe('RemoteOwner', () => {
  it('gives 1,000 handles distinct 16-byte capabilities, each looked up by its own only', () => {
    const table = owner();
    const tensor = Tensor.zeros([4], 'u8');
    const wires = Array.from({ length: 1000 }, () => table.expose(tensor, '127.0.0.1:5000', (forget) => forget));
    const secrets = wires.map((w) => Buffer.from(w.s!).toString('hex'));
    expect(new Set(secrets).size).toBe(1000);
    expect(wires.every((w) => w.s!.length === 16 && w.s!.some((b) => b !== 0))).toBe(true);
    for (const w of wires) expect(table.lookup(w.x!, w.s!)).toBe(tensor);
    // Another handle's capability does not open this one.
    const wrong = thrown(() => table.lookup(wires[0]!.x!, wires[1]!.s!));
    expect(wrong.code).toBe(Code.NOT_FOUND);
    expect(wrong.rawMessage).toMatch(/unknown or has been released/);
  });

  it('forgets a handle once spent: its lookup is NOT_FOUND', () => {
    const table = owner();
    const wire = table.expose(Tensor.zeros([1], 'u8'), '127.0.0.1:5000', (forget) => forget);
    table.claim(wire.x!, wire.s!).spend();
    expect(table.size).toBe(0);
    expect(() => table.lookup(wire.x!, wire.s!)).toThrow(/unknown or has been released/);
  });

  it('lets one pull claim a handle at a time: another claim is NOT_FOUND until it is given back; lookups still see it', () => {
    const table = owner();
    const tensor = Tensor.zeros([1], 'u8');
    const wire = table.expose(tensor, '127.0.0.1:5000', (forget) => forget);
    const claim = table.claim(wire.x!, wire.s!);
    expect(claim.tensor).toBe(tensor);
    const second = thrown(() => table.claim(wire.x!, wire.s!));
    expect(second.code).toBe(Code.NOT_FOUND);
    expect(second.rawMessage).toMatch(/being pulled by another call/);
    expect(table.lookup(wire.x!, wire.s!)).toBe(tensor);
    claim.unclaim();
    table.claim(wire.x!, wire.s!).spend();
    expect(table.size).toBe(0);
    // A wrong capability never claims.
    const other = table.expose(tensor, '127.0.0.1:5000', (forget) => forget);
    expect(thrown(() => table.claim(other.x!, wire.s!)).rawMessage).toMatch(/unknown or has been released/);
  });
});
