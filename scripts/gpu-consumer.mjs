#!/usr/bin/env node
// On the GPU machine: runs the consumer project that scripts/gpu-pack.sh built from the packed
// tarball (test/consumer/fixtures/esm-ts compiled with tsc, gdrpc installed from `npm pack` into
// its node_modules): a server and a client as two plain `node` processes, with the argument on
// each device given (the result lands on the client's current GPU: the schema says @cuda), and
// prints one JSON line per run. Exits 1 when any run fails.
// Usage: node scripts/gpu-consumer.mjs <consumer-dir> [device ...]   (default: cpu cuda:0)
import { execFileSync, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const [dir, ...devices] = process.argv.slice(2);
if (!dir) {
  console.error('usage: node scripts/gpu-consumer.mjs <consumer-dir> [device ...]');
  process.exit(2);
}

async function runOn(device) {
  const server = spawn(process.execPath, ['out/server.js'], { cwd: dir, stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    const port = await new Promise((resolve, reject) => {
      createInterface({ input: server.stdout }).on('line', (line) => {
        const m = /^port (\d+)$/.exec(line);
        if (m) resolve(Number(m[1]));
      });
      server.once('exit', (code) => reject(new Error(`server exited (${code}) before listening`)));
    });
    const out = execFileSync(process.execPath, ['out/client.js', `127.0.0.1:${port}`, device], { cwd: dir, encoding: 'utf8', timeout: 120_000 });
    // The client prints one JSON line; anything else on stdout (UCX logs there by default) is
    // reported beside the result, not parsed.
    const lines = out.split('\n').filter((line) => line.trim() !== '');
    const json = lines.filter((line) => line.startsWith('{'));
    if (json.length !== 1) return { input: device, ok: false, error: `expected one JSON line from the client, got ${json.length}`, stdout: out.slice(-2000) };
    const result = JSON.parse(json[0]);
    const ok = JSON.stringify(result.values) === '[2,4,6,9]' && result.sum === 21 && result.refused === 'INVALID_ARGUMENT';
    const other = lines.filter((line) => !line.startsWith('{'));
    return { input: device, ok, ...result, ...(other.length > 0 ? { otherStdout: other } : {}) };
  } catch (error) {
    return { input: device, ok: false, error: String(error?.message ?? error) };
  } finally {
    server.stdin.end();
  }
}

let failed = 0;
for (const device of devices.length > 0 ? devices : ['cpu', 'cuda:0']) {
  const r = await runOn(device);
  if (!r.ok) failed++;
  console.log(JSON.stringify(r));
}
process.exitCode = failed === 0 ? 0 : 1;
