// The functions that took the most of a V8 CPU profile's samples (bench/cpu-profile.mjs writes
// them), by self time, optionally within the last `--last-ms` of the profile:
//   node --import tsx bench/profile-top.ts <file.cpuprofile> [--last-ms N] [--top N]
import { readFileSync } from 'node:fs';

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[]; timeDeltas: number[] }

/** Self time by function (name, file, line) over the profile's last `lastMs` (all of it without). */
export function selfTimes(profile: Profile, lastMs?: number): { total: number; rows: Array<{ name: string; us: number; share: number }> } {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const at: number[] = [];
  let t = profile.startTime;
  for (const delta of profile.timeDeltas) at.push((t += delta));
  const from = lastMs === undefined ? -Infinity : profile.endTime - lastMs * 1000;
  const self = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < profile.samples.length; i += 1) {
    if (at[i]! < from) continue;
    // A sample's time is the gap to the next one.
    const us = (at[i + 1] ?? profile.endTime) - at[i]!;
    const frame = byId.get(profile.samples[i]!)!.callFrame;
    const file = frame.url.split('/').slice(-2).join('/');
    const name = `${frame.functionName || '(anonymous)'} ${file}${file !== '' ? `:${frame.lineNumber + 1}` : ''}`;
    self.set(name, (self.get(name) ?? 0) + us);
    total += us;
  }
  const rows = [...self].map(([name, us]) => ({ name, us, share: us / total })).sort((a, b) => b.us - a.us);
  return { total, rows };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, ...flags] = process.argv.slice(2);
  if (file === undefined) throw new Error('usage: profile-top.ts <file.cpuprofile> [--last-ms N] [--top N]');
  const flag = (name: string): number | undefined => {
    const at = flags.indexOf(name);
    return at >= 0 ? Number(flags[at + 1]) : undefined;
  };
  const { total, rows } = selfTimes(JSON.parse(readFileSync(file, 'utf8')) as Profile, flag('--last-ms'));
  console.log(`${file}: ${(total / 1000).toFixed(1)} ms sampled`);
  for (const row of rows.slice(0, flag('--top') ?? 25)) console.log(`${(row.share * 100).toFixed(1).padStart(5)} %  ${(row.us / 1000).toFixed(1).padStart(8)} ms  ${row.name}`);
}
