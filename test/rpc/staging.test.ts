// Staging through host memory, exercised on host memory: with staging forced for host tensors
// (the internal test switch), tensors go through a bounce tensor exactly as CUDA tensors do where
// UCX cannot map GPU memory. Contents must survive, paths read 'staged', and noStaging refuses on
// either side (the caller's sends and receipts, the server's receipts and results).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, processPool, closeProcessPools, Runtime, serveRemoteTensors, shutdownOwner, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

const KiB = 1024;
let plain: ListeningPeer;
let staging: ListeningPeer;

/** The internal switch, on the default runtime (the owner server below keeps it open). */
function setHostStagingForTests(on: boolean): void {
  Runtime.default().hostStagingForTests = on;
}

async function runs(client: Client): Promise<number> {
  const result = await client.unary(EchoDescriptor.methods.stats, {});
  return (JSON.parse(result.json as string) as { runs: Record<string, number> }).runs.echo ?? 0;
}

async function failure(promise: Promise<unknown>): Promise<GdrpcError> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  return error as GdrpcError;
}

beforeAll(async () => {
  [plain, staging] = await Promise.all([startServer({ poolBytes: 8 << 20 }), startServer({ poolBytes: 8 << 20, inlineBytes: 0, stageHost: true })]);
  serveRemoteTensors({ host: '127.0.0.1' });
});
afterAll(async () => {
  setHostStagingForTests(false);
  await shutdownOwner();
  await closeProcessPools();
  await disposePeers();
});

describe('staging through host memory (forced on host tensors)', () => {
  it('the caller stages its sends and receipts: exact contents, path staged, bounces returned', async () => {
    setHostStagingForTests(true);
    const client = await Client.connect(plain.address);
    try {
      for (const mover of ['tag'] as const) {
        const x = patterned(64 * KiB, 7);
        const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: mover }, { mover });
        const y = result.y as Tensor;
        expect(y.equals(x)).toBe(true);
        expect(callInfo(result)!.transfers.map((t) => `${t.argument}:${t.mover}:${t.path}`)).toEqual([`x:${mover}:staged`, `y:${mover}:staged`]);
        y.release();
      }
      // Bounces come from the process's host pool (no CUDA here: not pinned) and all went back.
      expect(processPool('cpu').stats()).toMatchObject({ used: 0, liveTensors: 0 });
      // Empty and inline tensors are never staged.
      const empty = await client.unary(EchoDescriptor.methods.echo, { x: patterned(0), tag: 'e' }, { mover: 'tag', noStaging: true });
      expect(callInfo(empty)!.transfers.every((t) => t.path === 'inline')).toBe(true);
    } finally {
      setHostStagingForTests(false);
      await client.close();
    }
  });

  it('a remote handle owned by a staging process is pulled through its bounce, exact', async () => {
    setHostStagingForTests(true);
    const client = await Client.connect(plain.address);
    try {
      const h = patterned(256 * KiB, 11);
      const expected = h.bytes().reduce((sum, byte) => sum + byte, 0);
      const result = await client.unary(EchoDescriptor.methods.pullSum, { h });
      expect(result.sum).toBe(expected);
      await expect.poll(() => processPool('cpu').stats().used, { timeout: 5000 }).toBe(0);
    } finally {
      setHostStagingForTests(false);
      await client.close();
    }
  });

  it('noStaging refuses the caller\'s staged argument before anything is sent', async () => {
    setHostStagingForTests(true);
    const client = await Client.connect(plain.address);
    try {
      const before = await runs(client);
      const error = await failure(client.unary(EchoDescriptor.methods.echo, { x: patterned(64 * KiB), tag: 'ns' }, { mover: 'tag', noStaging: true }));
      expect(error.code).toBe(Code.FAILED_PRECONDITION);
      expect(error.message).toMatch(/x: .*stage through host memory \(noStaging\): host staging forced/);
      expect(await runs(client)).toBe(before);
    } finally {
      setHostStagingForTests(false);
      await client.close();
    }
  });

  it('a server that stages refuses noStaging arguments (handler never runs) and results (after the handler)', async () => {
    const client = await Client.connect(staging.address);
    try {
      const x = patterned(64 * KiB, 3);
      // Staging allowed: the server stages both ways, the caller does not.
      const ok = await client.unary(EchoDescriptor.methods.echo, { x, tag: 'ok' }, { mover: 'tag' });
      expect((ok.y as Tensor).equals(x)).toBe(true);
      // The caller reports its own side for x; y says it was staged by the server (`st`).
      // x went between two processes on one node: TCP loopback, or shared memory where trusted
      // peers enabled it (UCX_MM_ERROR_HANDLING=y, core/native.ts).
      const local = /^(y|yes|1|on)$/i.test(process.env.UCX_MM_ERROR_HANDLING ?? '') ? 'shm' : 'tcp';
      expect(callInfo(ok)!.transfers.map((t) => `${t.argument}:${t.path}`)).toEqual([`x:${local}`, 'y:staged']);
      (ok.y as Tensor).release();

      const before = await runs(client);
      const argument = await failure(client.unary(EchoDescriptor.methods.echo, { x, tag: 'a' }, { mover: 'tag', noStaging: true }));
      expect(argument.code).toBe(Code.FAILED_PRECONDITION);
      expect(argument.message).toMatch(/x: receiving into cpu would stage/);
      expect(await runs(client)).toBe(before);

      // A 1 KiB argument goes inline (never staged); the server sends its result by tag
      // (inlineBytes 0), which it would stage: refused once the handler has run.
      const result = await failure(client.unary(EchoDescriptor.methods.echo, { x: patterned(KiB), tag: 'r' }, { noStaging: true }));
      expect(result.code).toBe(Code.FAILED_PRECONDITION);
      expect(result.message).toMatch(/y: .*stage through host memory \(noStaging\)/);
      expect(await runs(client)).toBe(before + 1);
    } finally {
      await client.close();
    }
  });
});
