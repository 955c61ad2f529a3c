// Protocol reports (tagSend/tagRecv with `describe`) against what UCX itself prints: the sending
// peer runs with UCX_PROTO_INFO=y, which prints its selection table for tag sends; every size
// class of that table (eager, multi-fragment eager, rendezvous; the boundaries read from the
// table) is sent, and the report of each send must name the protocol and transport of its row,
// map to the path class of the transport under test, and the bytes must arrive intact.
import { afterEach, describe, expect, it } from 'vitest';
import { parseProtocol, pathOfProtocol } from '../../core/rpc/movers/protocol.ts';
import type { ProtocolReport } from '../../core/ucx/index.ts';
import { parseProtocolTables, type ProtocolRow } from '../gpu/fixtures/proto-info.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT, localSide, TRANSPORTS, type TransportName } from './local.ts';
import { digest, pattern } from './pattern.ts';

afterEach(disposePeers);
const TAG_SEND = 'tagged message by ucp_tag_send* from host memory';
const LARGEST = 8 << 20;

/** Sizes that probe every row: its first and last byte counts (capped), 0 left out (never a tensor). */
function sizesOf(rows: ProtocolRow[]): number[] {
  const sizes = rows.flatMap((row) => [row.from, Math.min(row.to, LARGEST)]).filter((size) => size > 0);
  return [...new Set(sizes)].sort((a, b) => a - b);
}

describe.each(Object.keys(TRANSPORTS) as TransportName[])('protocol reports over %s', (transport) => {
  const config = TRANSPORTS[transport];
  const local = localSide(config);

  it('match the table UCX_PROTO_INFO=y prints, size class by size class', async () => {
    await using peer = await NativePeer.start(config, { UCX_PROTO_INFO: 'y' });
    const ep = await connect(local.worker, peer.port);
    // The table of the connected endpoint (the wire-up endpoint's is printed empty first).
    let rows: ProtocolRow[] = [];
    await expect.poll(async () => {
      const tag = 1n;
      const received = local.worker.tagRecv(Buffer.alloc(1), tag, EXACT);
      await peer.call('send', { tag: String(tag), size: 1, seed: 1 });
      await received;
      rows = parseProtocolTables(peer.output()).filter((block) => block.operation === TAG_SEND).at(-1)?.rows ?? [];
      return rows.length;
    }, { timeout: 10_000 }).toBeGreaterThan(0);
    const sizes = sizesOf(rows);
    // Both eager and rendezvous rows, or the thresholds this test is about are not covered.
    expect(rows.some((row) => /rendezvous/.test(row.description))).toBe(true);
    expect(rows.some((row) => /eager/.test(row.description))).toBe(true);
    const path = transport === 'tcp' ? 'tcp' : 'shm';
    for (const [index, size] of sizes.entries()) {
      const tag = 0x100n + BigInt(index);
      const dst = Buffer.alloc(size);
      const received = local.worker.tagRecv(dst, tag, EXACT, { describe: true });
      const sent = await peer.call<ProtocolReport>('sendDescribed', { tag: String(tag), size, seed: size });
      const got = await received;
      expect(digest(dst)).toBe(digest(pattern(size, size)));
      const row = rows.find((candidate) => candidate.from <= size && size <= candidate.to)!;
      const what = `${size} bytes: ${sent.initialProtocol}`;
      // Right after the call: the protocol UCX selected, as its table says ("(?)": an estimate).
      const initial = parseProtocol(sent.initialProtocol)!;
      expect(initial, what).toBeDefined();
      expect(initial.description, what).toBe(row.description.replace(/^\(\?\) /, ''));
      expect(row.config, what).toContain(initial.transports[0]);
      // At completion: the same protocol for eager sends; the data push for a rendezvous the
      // receiver answered with RTR (these transports have no RMA the receiver could pull with).
      const final = parseProtocol(sent.protocol)!;
      expect(final, sent.protocol).toBeDefined();
      if (/rendezvous/.test(row.description)) expect(final.operation, sent.protocol).toMatch(/^rndv_/);
      else expect(final.text).toBe(initial.text);
      expect(pathOfProtocol(final, 'host', 'host'), sent.protocol).toBe(path);
      // Receives are never described (native/src/request.h says why): asked for, nothing comes back.
      expect(got.protocol).toBeUndefined();
      expect(got.length).toBe(size);
    }
    await ep.close();
  }, 120_000);

  it('a send of a length and memory type already described may complete inside the call, and is described the same', async () => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const path = transport === 'tcp' ? 'tcp' : 'shm';
    for (const size of [64, 4096]) {
      const before = local.worker.stats().describedInline;
      const reports: ProtocolReport[] = [];
      // Eager sizes: UCX completes a send once the bytes are out, whether the peer has a receive
      // posted or not (they wait in its unexpected queue).
      for (let i = 0; i < 20; i += 1) reports.push((await ep.tagSend(0x200n + BigInt(size), pattern(size, i), { describe: true }))!);
      const first = reports[0]!;
      expect(pathOfProtocol(parseProtocol(first.protocol)!, 'host', 'host'), first.protocol).toBe(path);
      expect(first.protocol).toContain(`length ${size} `);
      for (const report of reports) expect(report).toEqual({ protocol: first.protocol, initialProtocol: first.initialProtocol });
      // The first was asked for a request to query; of the rest, those UCX finished inside the
      // call were described from the endpoint's description, all by one frozen object.
      const inline = local.worker.stats().describedInline - before;
      expect(inline, `${size} bytes`).toBeGreaterThan(0);
      const shared = reports.filter((report) => Object.isFrozen(report));
      expect(shared.length).toBe(inline);
      expect(new Set(shared).size).toBe(1);
      expect(() => { (shared[0] as { protocol: string }).protocol = 'changed'; }).toThrow(TypeError);
      expect(shared[0]!.protocol).toBe(first.protocol);
    }
    // A rendezvous is never kept: each one is asked for its own request and described afresh.
    const size = 4 << 20;
    const before = local.worker.stats().describedInline;
    for (let i = 0; i < 2; i += 1) {
      const tag = 0x300n + BigInt(i);
      const received = peer.call<{ length: number }>('recv', { tag: String(tag), size, mask: String((1n << 64n) - 1n) });
      const report = (await ep.tagSend(tag, pattern(size, i), { describe: true }))!;
      expect((await received).length).toBe(size);
      expect(report.initialProtocol, report.initialProtocol).toMatch(/rendezvous/);
      expect(Object.isFrozen(report)).toBe(false);
      expect(report.protocol).toContain(`length ${size} `);
    }
    expect(local.worker.stats().describedInline).toBe(before);
    await ep.close();
  }, 60_000);

  it('reports nothing extra without describe', async () => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const received = local.worker.tagRecv(Buffer.alloc(64), 7n, EXACT);
    await peer.call('send', { tag: '7', size: 64, seed: 2 });
    expect(await received).toEqual({ senderTag: 7n, length: 64 });
    expect(await ep.tagSend(8n, Buffer.alloc(8))).toBeUndefined();
    await ep.close();
  }, 60_000);
});
