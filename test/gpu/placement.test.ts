// Receive placement on GPUs (issue 12): the `device` option of the receiving side decides where a
// bare `@cuda` lands, `@cuda(0)` stays on cuda:0 and `@host` in host memory, in both directions:
// a server whose service (or whose ServerOptions) says cuda:1 receives arguments there, and a
// client that says cuda:1 receives results there. Two processes, contents checked by byte sums.
// test/rpc/placement.test.ts covers the resolution itself and the option's checks without a GPU.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, closeProcessPools, Tensor, type ClientOptions, type CudaDevice } from '../../core/index.ts';
import { announce, deviceCount, DRY_RUN, skipReason } from './fixtures/env.ts';
import { startServerProcess, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';
import { PlacementDescriptor } from '../schemas/gen/gpu/placement.ts';
import { byteSum, patternBytes } from './fixtures/host-pattern.ts';

announce('test/gpu/placement.test.ts');
// A dry run has no devices to tell apart.
if (DRY_RUN) console.log('test/gpu/placement.test.ts skipped: nothing to place in a host-memory dry run');
const runs = skipReason === undefined && !DRY_RUN;
const twoGpus = runs && deviceCount >= 2;

const SIZES = [1, 64 << 10, 4 << 20];
const { take, give } = PlacementDescriptor.methods;

async function startServer(options: { server?: CudaDevice; register?: CudaDevice }): Promise<GpuPeer> {
  return startServerProcess('./placement-server.ts', { GDRPC_PLACEMENT_SERVER: JSON.stringify(options) });
}

const clients: Client[] = [];
async function connect(peer: GpuPeer, options: ClientOptions = {}): Promise<Client> {
  const client = await Client.connect(peer.address, { poolBytes: 16 << 20, ...options });
  clients.push(client);
  return client;
}

afterAll(async () => {
  for (const client of clients) await client.close();
  await closeProcessPools();
  await disposePeers();
});

/** Sends x and z from cuda:0 and h from host memory; the server answers where they landed. */
async function sendAll(client: Client, n: number): Promise<{ devices: string; sums: string; expected: string }> {
  const host = [1, 2, 3].map((seed) => Tensor.fromArray(patternBytes(n, seed)));
  const [x, z] = [host[0]!.to('cuda:0'), host[1]!.to('cuda:0')];
  try {
    const result = await client.unary(take, { x, z, h: host[2]! });
    const expected = [1, 2, 3].map((seed) => byteSum(patternBytes(n, seed))).join(' ');
    return { devices: result.devices as string, sums: result.sums as string, expected };
  } finally {
    for (const t of [...host, x, z]) t.release();
  }
}

/** Asks for x, z and h; returns where each landed and whether its bytes are the pattern. */
async function receiveAll(client: Client, n: number): Promise<{ devices: string; intact: boolean[] }> {
  const result = await client.unary(give, { n });
  const tensors = ['x', 'z', 'h'].map((name) => result[name] as Tensor);
  try {
    const intact = tensors.map((t, i) => {
      const copy = t.to('cpu');
      try { return Buffer.from(copy.bytes()).equals(Buffer.from(patternBytes(n, i + 1))); } finally { copy.release(); }
    });
    return { devices: tensors.map((t) => t.device).join(' '), intact };
  } finally {
    for (const t of tensors) t.release();
  }
}

describe.skipIf(!runs)('receive placement, one GPU: the default is cuda:0', () => {
  let server: GpuPeer;
  beforeAll(async () => { server = await startServer({}); }, 120_000);

  it.each(SIZES)('%i bytes each way', async (n) => {
    const client = await connect(server);
    const sent = await sendAll(client, n);
    expect(sent.devices).toBe('cuda:0 cuda:0 cpu');
    expect(sent.sums).toBe(sent.expected);
    expect(await receiveAll(client, n)).toEqual({ devices: 'cuda:0 cuda:0 cpu', intact: [true, true, true] });
  }, 60_000);
});

describe.skipIf(!twoGpus)('receive placement, two GPUs', () => {
  // The server's side: the service's registration, or the server's default, says cuda:1.
  for (const options of [{ register: 'cuda:1' }, { server: 'cuda:1' }, { server: 'cuda:0', register: 'cuda:1' }] as const) {
    describe(`server ${JSON.stringify(options)}`, () => {
      let server: GpuPeer;
      beforeAll(async () => { server = await startServer(options); }, 120_000);

      it.each(SIZES)('%i bytes: @cuda arguments land on cuda:1, @cuda(0) on cuda:0, @host in host memory', async (n) => {
        const sent = await sendAll(await connect(server), n);
        expect(sent.devices).toBe('cuda:1 cuda:0 cpu');
        expect(sent.sums).toBe(sent.expected);
      }, 60_000);
    });
  }

  describe('client', () => {
    let server: GpuPeer;
    beforeAll(async () => { server = await startServer({}); }, 120_000);

    it.each(SIZES)('%i bytes: with device cuda:1, @cuda results land on cuda:1, @cuda(0) on cuda:0', async (n) => {
      const client = await connect(server, { device: 'cuda:1' });
      expect(await receiveAll(client, n)).toEqual({ devices: 'cuda:1 cuda:0 cpu', intact: [true, true, true] });
    }, 60_000);

    it('without the option, @cuda results land on cuda:0', async () => {
      expect((await receiveAll(await connect(server), 4096)).devices).toBe('cuda:0 cuda:0 cpu');
    }, 60_000);
  });
});
