// A runtime that closes right after its last call: what its peer sent meanwhile is received and
// dropped, not left in UCX's queue, where the worker's destroy reports each message on stdout
// ("unexpected tag-receive descriptor ... was not matched"; the consumer check on the H200 machine
// printed one such line). And drainForClose, which takes what is left once the endpoints are closed.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { Runtime, Server } from '../../core/index.ts';
import { dataTag, ConnectionKey, EXACT_MASK } from '../../core/wire/tag.ts';
import { RawPeer } from './fixtures/raw-peer.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));

function runFixture(bytes: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', 'test/rpc/fixtures/close-drain-main.ts', String(bytes)], { cwd: root, timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`close-drain-main failed: ${error.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

describe('a runtime closed right after its last call', () => {
  it.each([64 << 10, 4 << 20])('leaves nothing in UCX\'s queue for its worker\'s destroy to report (%i-byte tensors)', async (bytes) => {
    const out = await runFixture(bytes);
    expect(out).not.toMatch(/was not matched/);
    // The program got to its end: the dispatcher's counters after the close.
    const stats = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, number>;
    expect(stats.connections).toBe(0);
  }, 130_000);
});

describe('Dispatcher.drainForClose', () => {
  let runtime: Runtime;
  let peer: RawPeer;

  beforeAll(async () => {
    runtime = Runtime.create();
    const server = Server.create({ runtime });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    peer = await RawPeer.connect(port);
  });
  afterAll(async () => {
    await peer.close();
    await runtime.close();
  });

  it('drops what waits in the unexpected queue and leaves it empty', async () => {
    // A payload for a connection nobody holds: it waits until a drain takes it. The periodic
    // drain may take one first, so the peer sends again until this side sees one waiting. The
    // binding's sweep would drop it after the pass that brings it in: off here, it stands for
    // what the sweep cannot reach (behind a line's oldest message that is someone's).
    const tag = dataTag(ConnectionKey.draw(() => true), 7);
    const before = runtime.dispatcher.stats().droppedPayloads;
    runtime.worker.sweep(false);
    onTestFinished(() => runtime.worker.sweep(true));
    let seen = false;
    for (let attempt = 0; attempt < 200 && !seen; attempt += 1) {
      await peer.endpoint.tagSend(tag, new Uint8Array(256));
      for (let turn = 0; turn < 200 && !seen; turn += 1) {
        seen = runtime.worker.tagProbe(tag, EXACT_MASK) !== null;
        if (!seen) await new Promise((resolve) => setImmediate(resolve));
      }
    }
    expect(seen).toBe(true);
    // In the turn that saw it: no periodic drain can run in between.
    expect(runtime.dispatcher.drainForClose()).toBeGreaterThanOrEqual(1);
    expect(runtime.worker.tagProbe(tag, EXACT_MASK)).toBeNull();
    expect(runtime.dispatcher.stats().droppedPayloads).toBeGreaterThan(before);
  });
});

describe('Runtime.close', () => {
  it('closes the endpoints while the dispatcher receives, drains what is left, then stops it and closes the worker', async () => {
    const runtime = Runtime.create();
    const server = Server.create({ runtime });
    await server.listen({ host: '127.0.0.1', port: 0 });
    const calls: string[] = [];
    const { worker, dispatcher } = runtime;
    const closeChildren = worker.closeChildren.bind(worker);
    const close = worker.close.bind(worker);
    const drainForClose = dispatcher.drainForClose.bind(dispatcher);
    const stop = dispatcher.stop.bind(dispatcher);
    worker.closeChildren = async () => { calls.push('closeChildren'); await closeChildren(); };
    worker.close = async () => { calls.push('worker.close'); await close(); };
    dispatcher.drainForClose = () => { calls.push('drainForClose'); return drainForClose(); };
    dispatcher.stop = () => { calls.push('stop'); stop(); };
    await runtime.close();
    expect(calls.slice(0, 4)).toEqual(['closeChildren', 'drainForClose', 'stop', 'worker.close']);
    expect(worker.closed).toBe(true);
  });
});
