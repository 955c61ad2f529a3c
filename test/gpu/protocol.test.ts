// What UCX itself says it used. callInfo() paths are derived from an endpoint's lanes; this asks
// UCX (UCX_PROTO_INFO=used, printed when the server's worker is destroyed) which protocols and
// transports moved the bytes, so a silent fallback to TCP or host staging cannot pass unnoticed.
import { afterAll, describe, expect, it } from 'vitest';
import type { Tensor } from '../../core/index.ts';
import { openClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, GPU_MOVERS, MiB, skipReason, topologies } from './fixtures/env.ts';
import { fillTensor } from './fixtures/pattern.ts';
import { startGpuServer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';
import { parseProtocolTables, usedRows } from './fixtures/proto-info.ts';

announce('test/gpu/protocol.test.ts');

const SIZE = 64 * MiB;

afterAll(disposePeers);

describe.skipIf(skipReason !== undefined)('protocols UCX used', () => {
  for (const topology of topologies) {
    it(`${topology.name}: large tensors moved over ${DRY_RUN ? 'shared memory' : 'cuda_ipc'}, never tcp`, async () => {
      const server = await startGpuServer({
        device: topology.server, poolBytes: 2 * SIZE, ownPoolBytes: 2 * SIZE,
        env: { UCX_PROTO_INFO: 'used', UCX_LOG_LEVEL: 'info' },
      });
      const side = openClientSide(topology.client, SIZE + MiB);
      try {
        const client = await side.connect(server.address, { poolBytes: SIZE + MiB });
        const x = side.pool.allocate([SIZE], 'u8');
        await fillTensor(x, 3);
        // The result follows the caller's mover: tag echo = server receives and sends by tag; RMA echo =
        // server reads with ucp_get and exposes its result (the client's get is not in this table).
        for (const mover of GPU_MOVERS) {
          const result = await client.unary(side.service.methods.echo, { x }, { mover });
          (result.y as Tensor).release();
        }
        x.release();
        await client.close();
        server.send('shutdown');
        expect((await server.exited).code).toBe(0);
      } finally {
        await side.close();
        server.kill();
      }
      const output = server.output();
      console.log(`UCX protocols used by the server (${topology.name}):\n${output.split('\n').filter((l) => l.includes('|')).join('\n')}`);
      const blocks = parseProtocolTables(output);
      expect(blocks.length).toBeGreaterThan(0);
      // Operations on the tensors' memory, for messages of 1 MiB and more.
      const rows = usedRows(blocks, DRY_RUN ? /host/ : /cuda/, MiB);
      expect(rows.length).toBeGreaterThan(0);
      for (const row of rows) {
        if (DRY_RUN) {
          expect(row.config, `${row.operation}: ${row.description}`).toMatch(/posix|sysv|cma|xpmem|knem/);
        } else {
          expect(row.config, `${row.operation}: ${row.description}`).toMatch(/cuda_ipc/);
          expect(row.description, row.operation).not.toMatch(/emulation/);
        }
        expect(row.config).not.toMatch(/tcp/);
      }
    }, 180_000);
  }
});
