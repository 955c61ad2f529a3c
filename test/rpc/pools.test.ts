// Process pools: results land in the process's shared pool, which belongs to the process rather
// than to a Client, so a result (and a pool a peer may have mapped) outlives the client that
// received it; createPool gives a caller its own pool on the same UCX context.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, closeProcessPools, createPool, nativeStats, processPool, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

let server: ListeningPeer;

beforeAll(async () => { server = await startServer({ poolBytes: 8 << 20 }); });
afterAll(async () => {
  await closeProcessPools();
  await disposePeers();
});

describe('process pools', () => {
  it('results live in the process pool and stay valid after their client closes', async () => {
    const shared = processPool('cpu', { bytes: 4 << 20 });
    const own = createPool({ device: 'cpu', bytes: 1 << 20 });
    expect(own).not.toBe(shared);
    const x = own.allocate([64 * 1024], 'u8');
    x.bytes().set(patterned(64 * 1024, 5).bytes());
    const client = await Client.connect(server.address, { poolBytes: 1 << 20 });
    expect(client.pool('cpu')).toBe(shared);  // already larger than this client asks for
    const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: 'p' }, { mover: 'tag' });
    const y = result.y as Tensor;
    expect(y.pool).toBe(shared);
    await client.close();
    // The pool and the tensor survive the client: the process still holds its runtime.
    expect(y.released).toBe(false);
    expect(y.equals(x)).toBe(true);
    expect(shared.closed).toBe(false);
    y.release();
    x.release();
    expect(shared.stats()).toMatchObject({ used: 0, liveTensors: 0 });

    // A second client reuses the same pool: no new registration.
    const regions = nativeStats().regions;
    const again = await Client.connect(server.address);
    const second = await again.unary(EchoDescriptor.methods.echo, { x: patterned(64 * 1024, 6), tag: 'q' }, { mover: 'tag' });
    expect((second.y as Tensor).pool).toBe(shared);
    expect(nativeStats().regions).toBe(regions);
    (second.y as Tensor).release();
    await again.close();

    // Asking for more than the shared pool has makes a larger one for later callers.
    const larger = processPool('cpu', { bytes: 16 << 20 });
    expect(larger).not.toBe(shared);
    expect(larger.stats().capacity).toBeGreaterThanOrEqual(16 << 20);
    expect(processPool('cpu')).toBe(larger);

    await closeProcessPools();
    expect(shared.closed && larger.closed && own.closed).toBe(true);
  });
});
