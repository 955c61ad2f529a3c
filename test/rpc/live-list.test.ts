// LiveList and IdTable (core/live-list.ts): the collections of live objects a pool and a
// connection keep, instead of Sets and Maps, so that a scavenge does not promote everything
// allocated since the last one once the process holds 64 MiB or more of ArrayBuffers.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { IdTable, LiveList } from '../../core/live-list.ts';

describe('LiveList', () => {
  it('keeps members in the order they came; a removed member is gone, removing it twice changes nothing', () => {
    const list = new LiveList<string>();
    const a = list.add('a');
    list.add('b');
    const c = list.add('c');
    list.remove(a);
    list.remove(a);
    expect(list.values()).toEqual(['b', 'c']);
    expect(list.size).toBe(2);
    list.remove(c);
    list.add('d');
    expect(list.values()).toEqual(['b', 'd']);
    expect(list.size).toBe(2);
  });

  it('a node of another list is left alone', () => {
    const one = new LiveList<number>();
    const two = new LiveList<number>();
    const node = one.add(1);
    two.add(2);
    two.remove(node);
    expect(one.values()).toEqual([1]);
    expect(two.values()).toEqual([2]);
  });

  it('drain calls each member still present, oldest first, and empties the list', () => {
    const list = new LiveList<() => void>();
    const ran: string[] = [];
    let second: ReturnType<typeof list.add> | undefined;
    list.add(() => { ran.push('first'); list.remove(second!); list.add(() => ran.push('late')); });
    second = list.add(() => ran.push('second'));
    list.add(() => ran.push('third'));
    list.drain((fn) => fn());
    expect(ran).toEqual(['first', 'third']);
    // One added while draining stays for the next drain.
    expect(list.size).toBe(1);
  });
});

describe('IdTable', () => {
  it('behaves as a Map of ids: set, get, has, delete, size, keys in the order added, values, entries', () => {
    const table = new IdTable<{ name: string }>();
    table.set(7, { name: 'seven' }).set(3, { name: 'three' }).set(9, { name: 'nine' });
    expect(table.get(3)).toEqual({ name: 'three' });
    expect(table.has(9)).toBe(true);
    expect(table.delete(3)).toBe(true);
    expect(table.delete(3)).toBe(false);
    expect(table.get(3)).toBeUndefined();
    table.set(11, { name: 'eleven' });  // reuses the freed slot
    table.set(7, { name: 'SEVEN' });    // replaces in place, keeps its place in the order
    expect(table.size).toBe(3);
    expect(table.keys()).toEqual([7, 9, 11]);
    expect(table.firstId()).toBe(7);
    expect(table.values().map((v) => v.name)).toEqual(['SEVEN', 'nine', 'eleven']);
    expect(table.entries().map(([id]) => id)).toEqual([7, 9, 11]);
    // Copies: deleting while going through them is fine.
    for (const id of table.keys()) table.delete(id);
    expect(table.size).toBe(0);
    expect(table.firstId()).toBeUndefined();
    table.set(1, { name: 'one' });
    table.clear();
    expect(table.size).toBe(0);
    expect(table.get(1)).toBeUndefined();
  });
});

/** Bytes that V8's scavenges promoted after the fixture's warm-up, in a process of its own doing
 *  MODE's churn (test/rpc/fixtures/live-list-gc.ts), from V8's own trace. */
function promotedAfterWarmUp(mode: 'ours' | 'map'): { promoted: number; scavenges: number } {
  const fixture = fileURLToPath(new URL('./fixtures/live-list-gc.ts', import.meta.url));
  const out = execFileSync(process.execPath, ['--expose-gc', '--trace-gc', '--trace-gc-nvp', '--import', 'tsx', fixture, mode], { encoding: 'utf8', maxBuffer: 64 << 20, timeout: 120_000 });
  const lines = out.split('\n');
  const from = lines.indexOf('MEASURE');
  expect(from, out.slice(0, 2000)).toBeGreaterThan(-1);
  expect(lines.some((line) => line.startsWith(`DONE ${mode}`))).toBe(true);
  let promoted = 0;
  let scavenges = 0;
  for (const line of lines.slice(from)) {
    if (!/ gc=s /.test(line)) continue;
    scavenges += 1;
    promoted += Number(/ promoted=(\d+)/.exec(line)?.[1] ?? 0);
  }
  return { promoted, scavenges };
}

describe('under a large ArrayBuffer (a host tensor pool)', () => {
  it('members that leave an IdTable or a LiveList die young: the scavenges promote next to nothing', () => {
    const ours = promotedAfterWarmUp('ours');
    // The same churn through a Map, for the record (V8's behaviour, not gdrpc's: printed only).
    const map = promotedAfterWarmUp('map');
    const mib = (bytes: number): string => (bytes / 2 ** 20).toFixed(2);
    console.log(`[live-list] promoted by ${ours.scavenges} scavenges: ${mib(ours.promoted)} MiB (IdTable + LiveList); by ${map.scavenges} scavenges of the same churn through a Map: ${mib(map.promoted)} MiB`);
    expect(ours.scavenges).toBeGreaterThan(5);
    expect(ours.promoted).toBeLessThan(2 ** 20);
  });
});
