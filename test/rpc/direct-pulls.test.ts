// Direct block-table pulls (RemoteTensor.pullBlocks `direct`, core/rpc/remote/direct.ts) on the
// CPU box: what an owner answers to gdrpc.Owner/map and held, with and without directPulls, that a
// pull asking for `direct` falls back to the two-sided way whenever the owner or this machine
// cannot serve it, and how the puller treats an owner's malformed answer. The direct copy itself
// needs GPUs: test/gpu/direct-pulls.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, RemoteTensor, Runtime, Server, serveRemoteTensors, shutdownOwner, Tensor, type TensorPool } from '../../core/index.ts';
import { HELD_METHOD, MAP_METHOD, runDirectPull } from '../../core/rpc/remote/direct.ts';
import { planBlockPull } from '../../core/rpc/remote/block-table.ts';
import { OwnerConnection, type OwnerClient } from '../../core/rpc/remote/owner-client.ts';
import type { Mapping } from '../../core/compute/ipc.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf } from './fixtures/stats.ts';
import { invalidArgument } from './fixtures/thrown.ts';

let plain: ListeningPeer;
let trusting: ListeningPeer;
let pool: TensorPool;
let runtime: Runtime;

/** A handle to a rows x cols u16 region at `owner`, whose element (i, j) is (i * cols + j) & 0xffff. */
async function region(client: Client, rows: number, cols: number): Promise<RemoteTensor> {
  return (await client.unary(EchoDescriptor.methods.region, { rows, cols })).h as RemoteTensor;
}

function rowsOf(tensor: Tensor, cols: number): number[][] {
  const values = Array.from(tensor.toArray() as Uint16Array);
  return Array.from({ length: values.length / cols }, (_, k) => values.slice(k * cols, (k + 1) * cols));
}

function rowOf(row: number, cols: number): number[] {
  return Array.from({ length: cols }, (_, j) => (row * cols + j) & 0xffff);
}

beforeAll(async () => {
  [plain, trusting] = await Promise.all([startServer(), startServer({ directPulls: true })]);
  runtime = Runtime.create();
  pool = runtime.createPool({ device: 'cpu', bytes: 1 << 20 });
});
afterAll(async () => {
  pool?.close({ force: true });
  await runtime?.close();
  await disposePeers();
});

describe('gdrpc.Owner/map and held', () => {
  it('an owner without directPulls refuses map PERMISSION_DENIED; one with it refuses a host tensor FAILED_PRECONDITION', async () => {
    for (const [peer, code] of [[plain, Code.PERMISSION_DENIED], [trusting, Code.FAILED_PRECONDITION]] as const) {
      const client = await Client.connect(peer.address, { runtime });
      try {
        const handle = await region(client, 4, 8);
        const error = await client.unary(MAP_METHOD, { x: handle.wire.x!, s: handle.wire.s! }).then(() => undefined, (thrown: unknown) => thrown);
        expect(error).toBeInstanceOf(GdrpcError);
        expect((error as GdrpcError).code).toBe(code);
        expect((error as GdrpcError).message).toMatch(code === Code.PERMISSION_DENIED ? /does not grant direct pulls/ : /host tensor/);
      } finally {
        await client.close();
      }
    }
  });

  it('held answers while the handle is exposed, NOT_FOUND for a forged capability and once the exposure ended', async () => {
    const client = await Client.connect(trusting.address, { runtime });
    const other = await Client.connect(trusting.address, { runtime });
    try {
      const handle = await region(client, 4, 8);
      const args = { x: handle.wire.x!, s: handle.wire.s! };
      await expect(other.unary(HELD_METHOD, args)).resolves.toEqual({});
      expect(await codeOf(other.unary(HELD_METHOD, { x: args.x, s: new Uint8Array(args.s.byteLength) }))).toBe(Code.NOT_FOUND);
      // A result handle lives while the connection it came on does: the owner ends it once it has
      // seen that connection close.
      await client.close();
      await expect.poll(() => other.unary(HELD_METHOD, args).then(() => 'answered', (error: GdrpcError) => error.code), { timeout: 20_000, interval: 50 }).toBe(Code.NOT_FOUND);
    } finally {
      await client.close();
      await other.close();
    }
  });
});

describe('serveRemoteTensors with directPulls', () => {
  it('grants map only when asked to (PERMISSION_DENIED without; with it, an unknown handle is NOT_FOUND)', async () => {
    for (const [directPulls, code] of [[undefined, Code.PERMISSION_DENIED], [true, Code.NOT_FOUND]] as const) {
      const owner = Runtime.create();
      const asker = Runtime.create();
      try {
        const at = serveRemoteTensors({ host: '127.0.0.1', runtime: owner, ...(directPulls !== undefined ? { directPulls } : {}) });
        const client = await Client.connect(at, { runtime: asker });
        try {
          expect(await codeOf(client.unary(MAP_METHOD, { x: 1, s: new Uint8Array(16) }))).toBe(code);
        } finally {
          await client.close();
        }
      } finally {
        await shutdownOwner(owner);
        await asker.close();
        await owner.close();
      }
    }
  });
});

describe('pullBlocks with direct', () => {
  it('pulls the two-sided way when the owner does not grant it, or the blocks land in host memory', async () => {
    for (const peer of [plain, trusting]) {
      const client = await Client.connect(peer.address, { runtime });
      try {
        const handle = await region(client, 64, 16);
        const asked = [63, 0, 5, 5, 40];
        const tensor = await handle.pullBlocks(asked, { pool, direct: true });
        try {
          expect(rowsOf(tensor, 16)).toEqual(asked.map((row) => rowOf(row, 16)));
          // The owner's gathered tensor `t`, not a direct read.
          expect(callInfo(tensor)?.transfers.map((t) => t.argument)).toEqual(['t']);
        } finally {
          tensor.release();
        }
        const via = await handle.connect();
        try {
          const into = Tensor.zeros([8, 16], 'u16');
          await handle.pullBlocks([1, 2], { into, at: [7, 0], via, direct: true });
          expect(rowsOf(into, 16)[7]).toEqual(rowOf(1, 16));
          expect(rowsOf(into, 16)[0]).toEqual(rowOf(2, 16));
        } finally {
          await via.close();
        }
      } finally {
        await client.close();
      }
    }
  });

  it('refuses a direct that is not a boolean, and a server refuses a directPulls that is not one', async () => {
    const client = await Client.connect(plain.address, { runtime });
    try {
      const handle = await region(client, 4, 8);
      expect(await invalidArgument(handle.pullBlocks([0], { direct: 'yes' as unknown as boolean }))).toMatch(/direct/);
    } finally {
      await client.close();
    }
    expect(() => Server.create({ directPulls: 1 as unknown as boolean })).toThrow(/directPulls/);
  });
});

describe('a direct pull against an owner it cannot trust to be well-formed (a fake owner)', () => {
  const source = { wire: { x: 1, s: new Uint8Array(16) }, dtype: 'u8', shape: [64, 32], byteLength: 2048 } as never;
  const plan = (): ReturnType<typeof planBlockPull> => ({ ...planBlockPull(source, [3, 1], { blockBytes: 32 }), device: 'cuda:0' });

  /** An owner client whose map answers `answer` (or throws it), counting calls by method. */
  function owner(answer: Record<string, unknown> | GdrpcError): OwnerClient & { asked: string[] } {
    const asked: string[] = [];
    return {
      asked,
      unary: async (method) => {
        asked.push(method.name);
        if (answer instanceof GdrpcError) throw answer;
        return answer;
      },
      copyBlocks: () => Promise.reject(new Error('no copy expected')),
      staging: () => { throw new Error('no staging expected'); },
      close: async () => undefined,
    };
  }

  it('falls back (resolves undefined) when the owner declines, and rethrows anything else', async () => {
    for (const declined of [new GdrpcError(Code.PERMISSION_DENIED, 'no'), new GdrpcError(Code.FAILED_PRECONDITION, 'host'), new GdrpcError(Code.NOT_FOUND, 'unknown method gdrpc.Owner/map')]) {
      await expect(runDirectPull(owner(declined), plan(), undefined)).resolves.toBeUndefined();
    }
    await expect(runDirectPull(owner(new GdrpcError(Code.NOT_FOUND, 'remote tensor 1 is unknown or has been released')), plan(), undefined)).rejects.toMatchObject({ code: Code.NOT_FOUND });
    await expect(runDirectPull(owner(new GdrpcError(Code.UNAVAILABLE, 'gone')), plan(), undefined)).rejects.toMatchObject({ code: Code.UNAVAILABLE });
  });

  it('refuses a handle of the wrong length, an offset or tensor length that is not a byte count, before mapping anything', async () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ h: new Uint8Array(63), o: 0, n: 1 << 20, l: 2048 }, /not 64 bytes/],
      [{ h: 'handle', o: 0, n: 1 << 20, l: 2048 }, /not 64 bytes/],
      [{ h: new Uint8Array(64), o: -1, n: 1 << 20, l: 2048 }, /offset/],
      [{ h: new Uint8Array(64), o: 0.5, n: 1 << 20, l: 2048 }, /offset/],
      [{ h: new Uint8Array(64), o: 2 ** 60, n: 1 << 20, l: 2048 }, /offset/],
      [{ h: new Uint8Array(64), o: 0, n: 1 << 20 }, /tensor length/],
      [{ h: new Uint8Array(64), o: 0, n: 1 << 20, l: -5 }, /tensor length/],
    ];
    for (const [answer, message] of bad) {
      const fake = owner(answer);
      const error = await runDirectPull(fake, plan(), undefined).then(() => undefined, (thrown: unknown) => thrown);
      expect(error, JSON.stringify(answer.o)).toMatchObject({ code: Code.INTERNAL });
      expect((error as GdrpcError).message).toMatch(message);
      expect(fake.asked).toEqual(['map']);
    }
  });

  it('falls back when the handle cannot be mapped on this machine (no CUDA here: the driver refuses)', async () => {
    const fake = owner({ h: new Uint8Array(64), o: 0, n: 1 << 20, l: 2048 });
    await expect(runDirectPull(fake, plan(), undefined)).resolves.toBeUndefined();
    expect(fake.asked).toEqual(['map']);
  });

  it('bounds the reads by the owner\'s length, not the descriptor\'s: a handle forwarded as a larger tensor is refused before mapping', async () => {
    // The capability covers 1,024 bytes at the owner; the descriptor (whoever sent the handle)
    // claims 2,048.
    const fake = owner({ h: new Uint8Array(64), o: 0, n: 1 << 20, l: 1024 });
    const error = await runDirectPull(fake, plan(), undefined).then(() => undefined, (thrown: unknown) => thrown);
    expect(error).toMatchObject({ code: Code.INVALID_ARGUMENT });
    expect((error as GdrpcError).message).toMatch(/describes a 2048-byte tensor, its owner holds 1024 bytes/);
    expect(fake.asked).toEqual(['map']);
  });

  it('over a shared connection, asks an owner that declined no more, and one it could not map no more (two-sided at once)', async () => {
    for (const answer of [new GdrpcError(Code.PERMISSION_DENIED, 'no'), { h: new Uint8Array(64), o: 0, n: 1 << 20, l: 2048 }]) {
      const fake = owner(answer);
      const via = new OwnerConnection('127.0.0.1:1', Object.assign(async () => fake, {}), fake);
      await expect(runDirectPull(fake, plan(), via)).resolves.toBeUndefined();
      expect(via.directDeclined).toBe(true);
      await expect(runDirectPull(fake, plan(), via)).resolves.toBeUndefined();
      expect(fake.asked).toEqual(['map']);
    }
    // A host tensor is declined for itself: the next handle is asked about.
    const fake = owner(new GdrpcError(Code.FAILED_PRECONDITION, 'host'));
    const via = new OwnerConnection('127.0.0.1:1', Object.assign(async () => fake, {}), fake);
    await runDirectPull(fake, plan(), via);
    await runDirectPull(fake, plan(), via);
    expect(via.directDeclined).toBe(false);
    expect(fake.asked).toEqual(['map', 'map']);
  });
});

describe('OwnerConnection mappings and grants', () => {
  /** A mapping that counts its unmaps. */
  function mapping(): Mapping & { closes: number } {
    const made = { device: 0, address: 0x1000n, bytes: 4096, closes: 0, close: () => { made.closes += 1; } };
    return made;
  }
  const client: OwnerClient = { unary: async () => ({}), copyBlocks: async () => undefined, staging: () => { throw new Error('unused'); }, close: async () => undefined };

  it('shares a mapping among pulls, keeps up to 8 unused ones (the least recently used unmapped first), unmaps a forgotten one and all at close', async () => {
    const via = new OwnerConnection('127.0.0.1:1', Object.assign(async () => client, {}), client);
    const made = new Map<string, Mapping & { closes: number }>();
    const open = (key: string) => (): Mapping => { const m = mapping(); made.set(key, m); return m; };
    const a = via.useMapping('0/a', open('0/a'));
    const b = via.useMapping('0/a', open('0/a-again'));
    expect(made.has('0/a-again')).toBe(false);
    expect(b.mapping).toBe(a.mapping);
    a.release();
    b.release();
    b.release();
    expect(made.get('0/a')!.closes).toBe(0);  // kept for the next pull
    // Eight more unused: the least recently used (0/a) goes.
    for (let k = 0; k < 8; k += 1) via.useMapping(`0/k${k}`, open(`0/k${k}`)).release();
    expect(made.get('0/a')!.closes).toBe(1);
    expect([...made.entries()].filter(([key]) => key.startsWith('0/k')).every(([, m]) => m.closes === 0)).toBe(true);
    // Used again, 0/k0 becomes the most recent; the next one unmaps 0/k1 instead.
    via.useMapping('0/k0', open('0/k0-again')).release();
    via.useMapping('0/z', open('0/z')).release();
    expect(made.get('0/k0')!.closes).toBe(0);
    expect(made.get('0/k1')!.closes).toBe(1);
    // Forgotten (the owner said the handle is gone): unmapped once unused.
    const f = via.useMapping('0/k2', open('0/k2-again'));
    f.release(true);
    expect(made.get('0/k2')!.closes).toBe(1);
    // At close every unused one is unmapped, one in use when its pull lets go.
    const busy = via.useMapping('0/k3', open('0/k3-again'));
    await via.close();
    expect([...made.entries()].filter(([key]) => key !== '0/k3').every(([, m]) => m.closes === 1)).toBe(true);
    expect(made.get('0/k3')!.closes).toBe(0);
    busy.release();
    expect(made.get('0/k3')!.closes).toBe(1);
  });

  it('keeps the owner\'s answers to map by handle, at most 256, the oldest dropped; a gone handle is forgotten', () => {
    const via = new OwnerConnection('127.0.0.1:1', Object.assign(async () => client, {}), client);
    const grant = (k: number) => ({ handle: new Uint8Array(64).fill(k & 0xff), offset: k, byteLength: 4096 });
    for (let k = 0; k < 257; k += 1) via.keepGrant(`h${k}`, grant(k));
    expect(via.grantOf('h0')).toBeUndefined();
    expect(via.grantOf('h1')?.offset).toBe(1);
    expect(via.grantOf('h256')?.offset).toBe(256);
    via.keepGrant('h1', undefined);
    expect(via.grantOf('h1')).toBeUndefined();
  });
});
