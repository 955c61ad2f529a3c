// Progress never starves the event loop: while a large upload is held up by a stopped peer, this
// process's timers keep running and the call fails on the liveness time instead of freezing.
import { afterAll, describe, expect, it } from 'vitest';
import { Client, Code, type GdrpcError } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

afterAll(async () => { await disposePeers(); });

describe('progress', () => {
  it('a 256 MiB upload to a stopped server leaves timers running and fails UNAVAILABLE', async () => {
    // Filled before connecting: filling 256 MiB blocks this loop for over a second on a loaded
    // machine, and a client silent that long on a live connection is rightly declared gone by the
    // server (liveness is the smaller of the two sides', 1500 ms here).
    const x = patterned(256 << 20, 4);
    await using server = await startServer({ poolBytes: 320 << 20, maxTensorBytes: 512 << 20 });
    const client = await Client.connect(server.address, { livenessMs: 1500, poolBytes: 0 });
    try {
      await client.unary(EchoDescriptor.methods.ping, { n: 1 });
      let ticks = 0;
      const timer = setInterval(() => { ticks += 1; }, 10);
      const started = Date.now();
      const call = client.unary(EchoDescriptor.methods.checksum, { x }).then(() => undefined, (e: GdrpcError) => e);
      // Stopped mid-transfer, once its bytes have started to move.
      setTimeout(() => server.stop(), Number(process.env.STOP_AFTER_MS ?? 30));
      const error = await call;
      const elapsed = Date.now() - started;
      clearInterval(timer);
      console.log(`[progress] failed with ${error?.code} after ${elapsed} ms; ${ticks} timer ticks of ~${Math.round(elapsed / 10)}`);
      expect(error?.code).toBe(Code.UNAVAILABLE);
      // A frozen loop ticks 0 times; a loaded machine still ticks far more than this.
      expect(ticks).toBeGreaterThan(elapsed / 10 / 10);
    } finally {
      server.kill();
      await client.close();
    }
  });
});
