// helper-40: one admitted peer's frame of maps with numeric keys (weighed ~15 B a byte by plain.ts,
// ~2,500 B a byte in V8's heap) against a server process.
import { afterAll, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer } from '../rpc/fixtures/peers.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';
import { disposePeers } from '../support/peer.ts';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });
afterAll(async () => { await disposePeers(); });

function body(maps: number, kind: 'ping' | 'keepalive'): Uint8Array {
  const base = kind === 'ping' ? packr.pack({ v: 2, svc: EchoDescriptor.methods.ping.service, m: 'ping', a: { n: 1 } }) : packr.pack({ v: 2 });
  const head = Uint8Array.from(base);
  let count: number;
  let rest: Uint8Array;
  if (head[0] === 0xde) { count = (head[1]! << 8) | head[2]!; rest = head.subarray(3); } else { count = head[0]! & 0x0f; rest = head.subarray(1); }
  const key = Uint8Array.from([0xa4, ...Buffer.from('junk')]);
  const arr = new Uint8Array(5 + 5 * maps);
  arr[0] = 0xdd; new DataView(arr.buffer).setUint32(1, maps);
  for (let i = 0; i < maps; i++) arr.set([0x81, 0xcd, 0x03, 0xff, 0x00], 5 + 5 * i);
  const out = new Uint8Array(3 + rest.length + key.length + arr.length);
  out.set([0xde, 0, count + 1]); out.set(rest, 3); out.set(key, 3 + rest.length); out.set(arr, 3 + rest.length + key.length);
  return out;
}

it('one REQUEST of numeric-keyed maps', async () => {
  const MAPS = Number(process.env.H40_MAPS ?? 200_000);
  const server = await startServer({});
  const port = server.port;
  const good = await Client.connect(server.address);
  const before = await serverStats(good);
  console.log('server rss before MiB', (before.rss / 1048576).toFixed(0));
  const raw = await RawPeer.connect(port);
  await raw.auth();
  expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  raw.keepAlive();
  const b = body(MAPS, process.env.H40_KIND === 'keepalive' ? 'keepalive' : 'ping');
  const kind = process.env.H40_KIND === 'keepalive' ? FrameKind.Keepalive : FrameKind.Request;
  const message = packMessage([{ kind, call: kind === FrameKind.Request ? 1 : 0, body: b }]);
  console.log('message bytes', message.length);
  const t0 = performance.now();
  await raw.sendBorrowing(message);
  const exited = await Promise.race([server.exited.then((e) => e), new Promise((r) => setTimeout(() => r('alive'), 60_000))]);
  console.log('after', Math.round(performance.now() - t0), 'ms: server', JSON.stringify(exited));
  if (exited === 'alive') {
    const after = await serverStats(good);
    console.log('server rss after MiB', (after.rss / 1048576).toFixed(0), 'disconnects', after.disconnects.slice(-3));
  }
  console.log('stderr tail:', String((server as any).stderr ?? '').slice(-600));
  await raw.close().catch(() => {});
  await good.close().catch(() => {});
}, 120_000);
