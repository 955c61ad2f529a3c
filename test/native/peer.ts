// A peer process for the native tests: owns its own UCX context, worker and listener, and runs
// commands sent by the test process over the IPC channel ({id, cmd, args} -> {id, result|error}).
import { existsSync, writeFileSync } from 'node:fs';
import { Context, Endpoint, Listener, MemoryRegion, RemoteKey, Worker, nativeStats } from '../../core/ucx/index.ts';
import { GdrpcError } from '../../core/errors.ts';
import { cuda } from '../../core/cuda.ts';
import { digest, fillPattern, pattern } from './pattern.ts';
import { announceReady } from '../support/ready-line.ts';

type Args = Record<string, unknown>;
let context: Context | undefined;
let worker: Worker | undefined;
let listener: Listener | undefined;
const accepted: Endpoint[] = [];
const connected: Endpoint[] = [];
const regions: MemoryRegion[] = [];

function endpoint(): Endpoint {
  const ep = accepted.at(-1) ?? connected.at(-1);
  if (!ep) throw new Error('no endpoint yet');
  return ep;
}

async function waitForConnection(): Promise<Endpoint> {
  if (accepted.length > 0) return accepted.at(-1)!;
  return new Promise((resolve) => listener!.once('connection', resolve));
}

const commands: Record<string, (args: Args) => unknown> = {
  init(args) {
    context = Context.create({ config: args.config as Record<string, string> });
    worker = Worker.create(context);
    listener = Listener.create(worker, { host: '127.0.0.1' });
    listener.on('connection', (ep) => accepted.push(ep));
    return { port: listener.port, pid: process.pid };
  },
  connect(args) {
    connected.push(Endpoint.connect(worker!, { host: '127.0.0.1', port: args.port as number }));
    return true;
  },
  /** Posts a receive of `size` bytes for `tag`; when it arrives, sends it back with tag + 1. */
  async echo(args) {
    const buffer = Buffer.alloc(args.size as number);
    const received = worker!.tagRecv(buffer, BigInt(args.tag as string), (1n << 64n) - 1n);
    process.send!({ event: 'posted', tag: args.tag });
    const info = await received;
    const ep = await waitForConnection();
    await ep.tagSend(BigInt(args.tag as string) + 1n, buffer.subarray(0, info.length));
    return { senderTag: String(info.senderTag), length: info.length };
  },
  async recv(args) {
    const buffer = Buffer.alloc(args.size as number);
    const received = worker!.tagRecv(buffer, BigInt(args.tag as string), BigInt(args.mask as string));
    process.send!({ event: 'posted', tag: args.tag });
    const info = await received;
    return { senderTag: String(info.senderTag), length: info.length, digest: digest(buffer.subarray(0, info.length)) };
  },
  async send(args) {
    const ep = await waitForConnection();
    await ep.tagSend(BigInt(args.tag as string), pattern(args.size as number, args.seed as number));
    return true;
  },
  /** Says 'armed', waits for the file `go` to exist, posts a send and, once it is posted (an eager
   *  message is on its way, a rendezvous has sent its announcement), writes the file `marker`.
   *  The test process hands over and waits with files, without turning its event loop (a turn
   *  would progress its worker). Then waits for the send. */
  async sendMarked(args) {
    const ep = await waitForConnection();
    process.send!({ event: 'armed', tag: args.tag });
    while (!existsSync(args.go as string)) await new Promise((resolve) => setTimeout(resolve, 1));
    const sent = ep.tagSend(BigInt(args.tag as string), pattern(args.size as number, args.seed as number));
    writeFileSync(args.marker as string, 'posted');
    await sent;
    return true;
  },
  /** Like send, reporting the protocol UCX selected for it (describe). */
  async sendDescribed(args) {
    const ep = await waitForConnection();
    return ep.tagSend(BigInt(args.tag as string), pattern(args.size as number, args.seed as number), { describe: true });
  },
  /** Maps a region filled with a pattern and hands out what a peer needs for RMA on it. */
  expose(args) {
    const buffer = new ArrayBuffer(args.size as number);
    fillPattern(new Uint8Array(buffer), args.seed as number);
    const region = MemoryRegion.map(context!, buffer);
    regions.push(region);
    return { address: String(region.address), length: region.length, rkey: Buffer.from(region.packRkey()).toString('base64') };
  },
  digestRegion(args) {
    const region = regions[args.index as number]!;
    if (region.buffer) return digest(new Uint8Array(region.buffer));
    const host = Buffer.alloc(region.length);
    cuda.copy(host, region.address, region.length);
    return digest(host);
  },
  /** Like expose, in device memory of GPU 0 (filled by a copy from host). */
  exposeCuda(args) {
    const size = args.size as number;
    const ptr = cuda.alloc(0, size);
    cuda.copy(ptr, pattern(size, args.seed as number), size);
    const region = MemoryRegion.map(context!, { address: ptr, length: size, memoryType: 'cuda' });
    regions.push(region);
    return { address: String(region.address), length: size, rkey: Buffer.from(region.packRkey()).toString('base64'),
      memoryType: region.memoryType };
  },
  /** Like echo, through device memory: receive into GPU 0, send back from there. */
  async echoCuda(args) {
    const size = args.size as number;
    const ptr = cuda.alloc(0, size);
    const region = MemoryRegion.map(context!, { address: ptr, length: size, memoryType: 'cuda' });
    const received = worker!.tagRecv(region.span(), BigInt(args.tag as string), (1n << 64n) - 1n);
    process.send!({ event: 'posted', tag: args.tag });
    const info = await received;
    const ep = await waitForConnection();
    await ep.tagSend(BigInt(args.tag as string) + 1n, region.span(0, info.length));
    region.close();
    cuda.free(ptr);
    return { senderTag: String(info.senderTag), length: info.length, memoryType: region.memoryType };
  },
  /** RMA from this side: get the peer's region into a local one and report its digest. */
  async getRemote(args) {
    const ep = await waitForConnection();
    const rkey = RemoteKey.unpack(ep, Buffer.from(args.rkey as string, 'base64'));
    const region = MemoryRegion.map(context!, new ArrayBuffer(args.length as number));
    await ep.get(region.span(), BigInt(args.address as string), rkey);
    const result = digest(new Uint8Array(region.buffer!));
    rkey.close();
    region.close();
    return result;
  },
  /** Receives `count` messages on `tag` and sends each back on tag + 1 (the leak test's partner). */
  async reflect(args) {
    const ep = await waitForConnection();
    const tag = BigInt(args.tag as string);
    const buffer = Buffer.alloc(args.size as number);
    process.send!({ event: 'posted', tag: args.tag });
    for (let i = 0; i < (args.count as number); i++) {
      const info = await worker!.tagRecv(buffer, tag, (1n << 64n) - 1n);
      await ep.tagSend(tag + 1n, buffer.subarray(0, info.length));
    }
    return nativeStats();
  },
  async waitConnections(args) {
    while (accepted.length < (args.count as number)) await new Promise((r) => listener!.once('connection', r));
    return accepted.length;
  },
  stats() {
    return nativeStats();
  },
  async shutdown() {
    for (const region of regions) {
      region.close();
      if (!region.buffer) cuda.free(region.address);
    }
    await worker?.close();
    context?.close();
    return nativeStats();
  },
};

process.on('message', async (message: { id: number; cmd: string; args: Args }) => {
  try {
    const command = commands[message.cmd];
    if (!command) throw new Error(`unknown command ${message.cmd}`);
    const result = await command(message.args ?? {});
    process.send!({ id: message.id, result });
  } catch (error) {
    const e = GdrpcError.from(error);
    process.send!({ id: message.id, error: { code: e.code, message: e.message } });
  }
});
process.on('disconnect', () => process.exit(0));
announceReady();
