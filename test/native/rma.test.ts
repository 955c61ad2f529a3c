// RMA put/get of host memory through packed remote keys, flush, contents verified; both
// directions (client endpoint and the server's accepted endpoint).
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryRegion, RemoteKey } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, localSide, TRANSPORTS, type TransportName } from './local.ts';
import { digest, fillPattern, pattern } from './pattern.ts';

afterEach(disposePeers);
interface Exposed { address: string; length: number; rkey: string }

describe.each(Object.keys(TRANSPORTS) as TransportName[])('RMA over %s', (transport) => {
  const config = TRANSPORTS[transport];
  const local = localSide(config);

  it.each([1, 8193, 4 << 20])('puts %i bytes into the peer region', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const remote = await peer.call<Exposed>('expose', { size, seed: 1 });
    const rkey = RemoteKey.unpack(ep, Buffer.from(remote.rkey, 'base64'));
    const buffer = new ArrayBuffer(size);
    fillPattern(new Uint8Array(buffer), 2);
    const region = MemoryRegion.map(local.context, buffer);
    expect(region.memoryType).toBe('host');
    await ep.put(region.span(), BigInt(remote.address), rkey);
    await ep.flush();
    expect(await peer.call('digestRegion', { index: 0 })).toBe(digest(pattern(size, 2)));
    rkey.close();
    region.close();
    await ep.close();
  });

  it.each([1, 8193, 4 << 20])('gets %i bytes from the peer region', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const remote = await peer.call<Exposed>('expose', { size, seed: 5 });
    const rkey = RemoteKey.unpack(ep, Buffer.from(remote.rkey, 'base64'));
    const region = MemoryRegion.map(local.context, new ArrayBuffer(size));
    await ep.get(region.span(), BigInt(remote.address), rkey);
    expect(digest(new Uint8Array(region.buffer!))).toBe(digest(pattern(size, 5)));
    rkey.close();
    region.close();
    await ep.close();
  });

  it('writes a sub-range at an offset and leaves the rest untouched', async () => {
    const size = 64 * 1024;
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const remote = await peer.call<Exposed>('expose', { size, seed: 7 });
    const rkey = RemoteKey.unpack(ep, Buffer.from(remote.rkey, 'base64'));
    const region = MemoryRegion.map(local.context, new ArrayBuffer(size));
    fillPattern(new Uint8Array(region.buffer!), 8);
    await ep.put(region.span(100, 1000), BigInt(remote.address) + 5000n, rkey);
    await ep.flush();
    const expected = pattern(size, 7);
    Buffer.from(region.buffer!, 100, 1000).copy(expected, 5000);
    expect(await peer.call('digestRegion', { index: 0 })).toBe(digest(expected));
    rkey.close();
    region.close();
    await ep.close();
  });

  it('lets the accepting side read the client region', async () => {
    const size = 1 << 20;
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    await peer.call('waitConnections', { count: 1 });
    const region = MemoryRegion.map(local.context, new ArrayBuffer(size));
    fillPattern(new Uint8Array(region.buffer!), 11);
    const got = await peer.call('getRemote', {
      address: String(region.address), length: size, rkey: Buffer.from(region.packRkey()).toString('base64') });
    expect(got).toBe(digest(pattern(size, 11)));
    await ep.close();
    region.close();
  });
});
