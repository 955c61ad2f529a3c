// Polling while transfers in device memory are in flight (native/src/device_wait.h), driven on a
// made-up clock: the header is compiled with fixtures/device-wait-scenarios.cc and each
// scenario's counts are checked here. What it buys on a GPU is measured on one (docs/binding.md),
// and test/gpu/transfer.test.ts checks that a CUDA transfer starts a spell.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gdrpc-device-wait-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Scenario { scenario: string; spells: number; limited: number; spinningTurns: number; inFlight: number; turnsBeforeLater?: number }

function scenarios(): Map<string, Scenario> {
  const binary = join(dir, 'device-wait-scenarios');
  execFileSync(process.env.CXX ?? 'c++', ['-std=c++17', '-O1', '-Wall', '-Werror', `-I${join(root, 'native/src')}`,
    join(root, 'test/native/fixtures/device-wait-scenarios.cc'), '-o', binary], { stdio: 'pipe' });
  const lines = execFileSync(binary, { encoding: 'utf8' }).trim().split('\n');
  return new Map(lines.map((line) => { const s = JSON.parse(line) as Scenario; return [s.scenario, s]; }));
}

describe('polling while device transfers are in flight', () => {
  const results = scenarios();

  it('polls a copy from its start to its end, and not after', () => {
    expect(results.get('one-copy')).toMatchObject({ spells: 1, limited: 0, spinningTurns: 750, inFlight: 0 });
  });

  it('never polls without a transfer in device memory', () => {
    expect(results.get('no-transfer')).toMatchObject({ spells: 0, spinningTurns: 0 });
  });

  it('never polls when polling is off (busyPollUs 0), even with a transfer in flight', () => {
    expect(results.get('off')).toMatchObject({ spells: 0, spinningTurns: 0, inFlight: 1 });
  });

  it('stops at the limit (5 ms) for a transfer whose bytes never come, and polls again when another begins', () => {
    const s = results.get('never-sent')!;
    expect(s.turnsBeforeLater).toBe(5000);
    expect(s.limited).toBe(1);
    expect(s.spells).toBe(2);
    expect(s.spinningTurns).toBe(5100);
  });

  it('polls overlapping copies for 5 ms after the last one began, and leaves a longer one to the fd', () => {
    expect(results.get('overlapping')).toMatchObject({ spells: 1, limited: 1, spinningTurns: 9000, inFlight: 0 });
  });

  it('charges a request left pending for good 5 ms after each later transfer began, not after each end', () => {
    expect(results.get('left-pending')).toMatchObject({ spells: 2, limited: 2, spinningTurns: 10000, inFlight: 1 });
  });
});
