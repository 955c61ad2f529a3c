// A JS listener that throws while the binding settles completions (here the endpoint's 'close')
// surfaces as an uncaught exception and nothing else: the worker keeps moving data, and every UCX
// request is returned (UCX warns at exit about requests that were not).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const child = fileURLToPath(new URL('./throwing-listener.ts', import.meta.url));

describe('a throwing event listener', () => {
  it('does not wedge the worker or leak requests', async () => {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', child], { timeout: 30_000 });
    const report = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(report.thrown).toEqual(['listener threw']);
    expect(report.closeOutcome).toBe('closed');
    expect(report.bytes).toEqual([1, 2, 3, 4]);
    expect(report.length).toBe(4);
    expect(Object.values(report.stats).every((n) => n === 0)).toBe(true);
    expect(stderr).not.toMatch(/not returned to mpool/);
  });
});
