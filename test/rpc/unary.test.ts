// Unary calls with tensors of every interesting size through every mover, contents verified,
// between two processes over real UCX.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, callInfo, Code, confirmedCallInfo, GdrpcError, type Tensor } from '../../core/index.ts';
import { runtimeWith } from './fixtures/runtime-env.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

const MiB = 1 << 20;
const SIZES = [0, 1, 4095, 4096, 4097, MiB, 64 * MiB];
// The rma mover is off unless a process opts in (docs/security.md); unsafe-rma.test.ts covers it.
const MOVERS = ['auto', 'inline', 'tag'] as const;

let server: ListeningPeer;
let client: Client;

beforeAll(async () => {
  server = await startServer({ poolBytes: 160 * MiB, maxTensorBytes: 128 * MiB });
  client = await Client.connect(server.address, { poolBytes: 80 * MiB });
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
});

describe('unary', () => {
  it('calls a method without tensors', async () => {
    const result = await client.unary(EchoDescriptor.methods.ping, { n: 41 });
    expect(result).toEqual({ n: 41 });
    expect(callInfo(result)?.transfers).toEqual([]);
  });

  it('refuses the rma mover by default: FAILED_PRECONDITION before anything is sent', async () => {
    const error = await client.unary(EchoDescriptor.methods.echo, { x: patterned(MiB), tag: 'r' }, { mover: 'rma' }).catch((e: unknown) => e);
    expect((error as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
    expect((error as GdrpcError).message).toMatch(/GDRPC_UNSAFE_RMA/);
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
  });

  for (const mover of MOVERS) {
    for (const size of SIZES) {
      it(`echoes ${size} bytes with mover ${mover}`, async () => {
        const x = patterned(size, size % 251);
        if (mover === 'inline' && size > 4 * MiB) {
          // Larger than the server's frame limit: refused before anything is sent.
          const error = await client.unary(EchoDescriptor.methods.echo, { x, tag: 't' }, { mover }).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(GdrpcError);
          expect((error as GdrpcError).code).toBe(Code.RESOURCE_EXHAUSTED);
          return;
        }
        const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: `t${size}` }, { mover });
        const y = result.y as Tensor;
        expect(result.tag).toBe(`t${size}`);
        expect(y.dtype).toBe('u8');
        expect(y.shape).toEqual([size]);
        expect(y.equals(x)).toBe(true);
        const sent = callInfo(result)!.transfers.find((t) => t.argument === 'x')!;
        const expected = size === 0 ? 'inline' : mover === 'auto' ? (size <= 4096 ? 'inline' : 'tag') : mover;
        expect(sent).toMatchObject({ bytes: size, mover: expected });
        // Processes on one node talk over TCP loopback unless shared memory is enabled for trusted
        // peers (UCX_MM_ERROR_HANDLING=y, core/native.ts).
        const local = /^(y|yes|1|on)$/i.test(process.env.UCX_MM_ERROR_HANDLING ?? '') ? 'shm' : 'tcp';
        expect(sent.path).toBe(expected === 'inline' ? 'inline' : local);
        // The caller's mover travels in the REQUEST: the result comes back the same way.
        const back = callInfo(result)!.transfers.find((t) => t.argument === 'y')!;
        expect(back).toMatchObject({ bytes: size, mover: expected, path: sent.path });
        // Tag transfers carry UCX's own description on the sending side: the protocol and lane the
        // path came from. The receiving side has the sender's, once its SENT came (docs/gpu.md
        // "Transfer paths"): confirmedCallInfo waits for it.
        const described = new RegExp(`^\\{[^}]*\\} (tag|rndv)_send from host memory length ${size} .*${local === 'tcp' ? 'tcp/' : '(posix|sysv|cma)/'}`);
        if (expected === 'tag') {
          expect(sent).toMatchObject({ source: 'ucx', protocol: expect.stringMatching(described) });
          expect(await confirmedCallInfo(result)).toBe(callInfo(result));
          expect(back).toMatchObject({ source: 'sender', path: local, protocol: expect.stringMatching(described) });
        } else {
          expect(sent.protocol).toBeUndefined();
          expect(back.protocol).toBeUndefined();
          expect([sent.source, back.source]).toEqual(['gdrpc', 'gdrpc']);
        }
        y.release();
      });
    }
  }

  it('without protocol reports (GDRPC_PROTOCOL_REPORTS=0) this side predicts its paths and carries no UCX description', async () => {
    const size = 1 * MiB;
    const x = patterned(size, 7);
    // Read when a runtime opens: this one asks UCX nothing and tells the server it wants no SENT.
    const runtime = runtimeWith({ GDRPC_PROTOCOL_REPORTS: '0' });
    const quiet = await Client.connect(server.address, { runtime, poolBytes: 4 * MiB });
    try {
      const result = await quiet.unary(EchoDescriptor.methods.echo, { x, tag: 'quiet' }, { mover: 'tag' });
      const y = result.y as Tensor;
      expect(y.equals(x)).toBe(true);
      const local = /^(y|yes|1|on)$/i.test(process.env.UCX_MM_ERROR_HANDLING ?? '') ? 'shm' : 'tcp';
      // Nothing to wait for: the server sends no SENT to a client that did not announce `rep`.
      await confirmedCallInfo(result);
      for (const argument of ['x', 'y']) {
        const info = callInfo(result)!.transfers.find((t) => t.argument === argument)!;
        expect(info).toMatchObject({ mover: 'tag', path: local, source: 'predicted' });
        expect(info.protocol).toBeUndefined();
      }
      y.release();
    } finally {
      await quiet.close();
      await runtime.close();
    }
  });
});
