// The peer fixture itself: the ready line, failures that say why, and an end that leaves nothing
// of the peer's process group behind.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { disposePeers, runPeer, spawnPeer } from './peer.ts';

const program = fileURLToPath(new URL('./fixtures/peer-program.ts', import.meta.url));

interface Info { pid: number; args: string[]; grandchild?: number }

/** True once `pid` names no process (a zombie awaiting its reaper counts as gone). */
function gone(pid: number): boolean {
  try { process.kill(pid, 0); } catch { return true; }
  try { return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return true; }
}

async function eventuallyGone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && !gone(pid); i += 1) await new Promise((resolve) => setTimeout(resolve, 50));
  return gone(pid);
}

function state(pid: number): string {
  return /^\d+ \(.*\) (\S)/.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))![1]!;
}

describe('spawnPeer', () => {
  it('resolves with the info of the ready line, lines before it kept', async () => {
    await using peer = await spawnPeer<Info>(program, { args: ['ready', 'x', 'y'] });
    expect(peer.ready).toEqual({ pid: peer.pid, args: ['x', 'y'] });
    expect(peer.lines[0]).toBe('a line before the ready line');
    expect(peer.alive).toBe(true);
  });

  it('fails with the exit code and the stderr of a peer that exits before its ready line', async () => {
    await expect(spawnPeer(program, { args: ['exit-early'], echoStderr: false }))
      .rejects.toThrow(/exited \(code 3\) before its ready line; stderr:\n.*no config here/);
  });

  it('fails with a clear message when no ready line comes in time, and kills the peer', async () => {
    const error = await spawnPeer(program, { args: ['silent'], readyTimeoutMs: 3000 }).then(() => new Error('got ready'), (e: unknown) => e as Error);
    expect(error.message).toMatch(/printed no ready line within 3000 ms[\s\S]*starting, but never ready/);
    const pid = Number(/\(pid (\d+)\)/.exec(error.message)![1]);
    expect(await eventuallyGone(pid)).toBe(true);
  });

  it('ends the whole process group at the end of an await using block', async () => {
    let info: Info;
    {
      await using peer = await spawnPeer<Info>(program, { args: ['family'] });
      info = peer.ready;
      expect(gone(info.pid) || gone(info.grandchild!)).toBe(false);
    }
    expect(await eventuallyGone(info.pid)).toBe(true);
    expect(await eventuallyGone(info.grandchild!)).toBe(true);
  });

  it('kills a peer that ignores SIGTERM once the grace is over', async () => {
    const peer = await spawnPeer(program, { args: ['stubborn'], echoStderr: false });
    expect(await peer.dispose(500)).toEqual({ code: null, signal: 'SIGKILL' });
    expect(peer.errors()).toMatch(/SIGTERM ignored/);
  });

  it('stops and resumes the peer, and kill() ends it', async () => {
    await using peer = await spawnPeer(program, { args: ['ready'] });
    peer.stop();
    await expect.poll(() => state(peer.pid)).toBe('T');
    peer.resume();
    await expect.poll(() => state(peer.pid)).not.toBe('T');
    expect(await peer.kill()).toEqual({ code: null, signal: 'SIGKILL' });
    expect(peer.alive).toBe(false);
  });

  it('disposePeers ends every peer still running, stopped ones included', async () => {
    const peers = await Promise.all([spawnPeer(program, { args: ['ready'] }), spawnPeer(program, { args: ['ready'] })]);
    peers[0]!.stop();
    await disposePeers();
    expect(peers.map((peer) => peer.exit)).toEqual([{ code: null, signal: 'SIGTERM' }, { code: null, signal: 'SIGTERM' }]);
  });
});

describe('runPeer', () => {
  it('runs a program to its end and returns its output', async () => {
    expect(await runPeer(program, 60_000, { args: ['result'] })).toMatchObject({ code: 0, signal: null, stdout: 'RESULT 42\n', timedOut: false });
  });

  it('kills a program that runs past its limit', async () => {
    expect(await runPeer(program, 1000, { args: ['silent'] })).toMatchObject({ timedOut: true, signal: 'SIGTERM' });
  });
});
