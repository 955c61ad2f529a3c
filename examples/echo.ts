// Echo: the smallest gdrpc service, called from another process. Shows a unary call with and
// without a tensor (and the path its bytes took), a server stream and a client stream.
//   node --import tsx examples/echo.ts
import { fileURLToPath } from 'node:url';
import { Client, Server, Tensor, callInfo } from '../core/index.ts';
import { Echo } from '../schemas/gen/echo.ts';
import { announce, exampleDevice, role, startRole } from './peer.ts';

if (role() === 'server') {
  const server = Server.create();
  Echo.register(server, {
    echo: (args) => args,
    ping: () => ({}),
    async *repeat({ text, count }) {
      for (let index = 0; index < count; index += 1) yield { text, index };
    },
    async collect(messages) {
      let bytes = 0n;
      let chunks = 0;
      for await (const { chunk } of messages) { bytes += BigInt(chunk.byteLength); chunks += 1; }
      return { bytes, chunks };
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
} else {
  const address = await startRole(fileURLToPath(import.meta.url), 'server');
  const client = await Client.connect(address);
  const echo = Echo.client(client);

  const started = performance.now();
  for (let i = 0; i < 1000; i += 1) await echo.ping();
  console.log(`ping: ${((performance.now() - started) / 1000 * 1000).toFixed(1)} us per call (1000 calls)`);

  const device = exampleDevice();
  const payload = Tensor.fromArray(new Uint8Array(1 << 20).map((_, i) => i & 0xff)).to(device);
  const result = await echo.echo({ text: 'hello', payload });
  console.log(`echo: "${result.text}", ${result.payload?.byteLength} bytes back, equal: ${result.payload?.equals(payload)}`);
  for (const t of callInfo(result)?.transfers ?? []) console.log(`  ${t.argument}: ${t.bytes} bytes by ${t.mover} over ${t.path}`);
  result.payload?.release();

  const lines: string[] = [];
  for await (const { text, index } of echo.repeat({ text: 'hi', count: 3 })) lines.push(`${index}:${text}`);
  console.log(`repeat: ${lines.join(' ')}`);

  const chunks = [1, 2, 3].map((n) => ({ chunk: Tensor.fromArray(new Uint8Array(n * 10_000)) }));
  const total = await echo.collect(chunks);
  console.log(`collect: ${total.chunks} chunks, ${total.bytes} bytes`);

  await client.close();
  process.exit(0);
}
