import { Code, type Tensor } from '../../core/index.ts';
import { codeOf, openClientSide } from './fixtures/client-side.ts';
import { MiB } from './fixtures/env.ts';
import { killAll, startGpuServer } from './fixtures/peer.ts';

const log = (s: string) => console.log(`${new Date().toISOString().slice(11, 23)} ${s}`);
const LONG = 64 * MiB;
const side = openClientSide('cpu', LONG + MiB);
const server = await startGpuServer({ device: 'cpu', poolBytes: 16 * LONG + MiB, ownPoolBytes: 2 * LONG + MiB });
const client = await side.connect(server.address, { poolBytes: 16 * LONG + MiB });
const fillMany = async (k: number): Promise<void> => {
  const result = await client.unary(side.service.methods.fillMany!, { k, n: LONG, seed: 31 });
  for (const y of result.ys as Tensor[]) y.release();
};
await fillMany(1);
log('warm done');
const call = codeOf(fillMany(Number(process.argv[2] ?? 4)));
await new Promise((r) => setTimeout(r, Number(process.argv[3] ?? 50)));
log('kill');
server.kill();
log(`code ${await call}`);
log('closing client');
await client.close();
log('closing side');
await side.close();
log('killAll');
await killAll();
log('done');
