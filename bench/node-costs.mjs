// `node bench/node-costs.mjs`: what Node.js itself costs on this machine, with no gdrpc and no UCX:
// a clock read, a loop turn (setImmediate), an await of a settled promise, and a 1-byte TCP
// loopback ping-pong between two Node processes (the floor of a round trip between two Node
// services over TCP here; docs/binding.md "Where a small call's time goes on the H200 machine").
import net from 'node:net';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

if (process.argv[2] === 'echo') {
  const server = net.createServer((socket) => { socket.setNoDelay(true); socket.on('data', (data) => socket.write(data)); });
  server.listen(0, '127.0.0.1', () => console.log(server.address().port));
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
} else {
  const N = 1_000_000;
  let t0 = process.hrtime.bigint();
  let sink = 0n;
  for (let i = 0; i < N; i += 1) sink += process.hrtime.bigint();
  console.log(`process.hrtime.bigint(): ${(Number(process.hrtime.bigint() - t0) / N).toFixed(1)} ns`);
  t0 = process.hrtime.bigint();
  let sum = 0;
  for (let i = 0; i < N; i += 1) sum += performance.now();
  console.log(`performance.now(): ${(Number(process.hrtime.bigint() - t0) / N).toFixed(1)} ns`);
  const M = 200_000;
  t0 = process.hrtime.bigint();
  await new Promise((resolve) => { let n = 0; const step = () => (++n < M ? setImmediate(step) : resolve()); setImmediate(step); });
  console.log(`setImmediate loop turn: ${(Number(process.hrtime.bigint() - t0) / M).toFixed(1)} ns`);
  t0 = process.hrtime.bigint();
  for (let i = 0; i < M; i += 1) sum += await Promise.resolve(i);
  console.log(`await of a settled promise: ${(Number(process.hrtime.bigint() - t0) / M).toFixed(1)} ns`);

  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'echo'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((resolve) => child.stdout.once('data', (data) => resolve(Number(String(data).trim()))));
  const socket = net.connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  await new Promise((resolve) => socket.on('connect', resolve));
  const one = () => new Promise((resolve) => { socket.once('data', resolve); socket.write('x'); });
  for (let i = 0; i < 3000; i += 1) await one();
  const samples = [];
  for (let i = 0; i < 10_000; i += 1) { const s = performance.now(); await one(); samples.push(performance.now() - s); }
  samples.sort((a, b) => a - b);
  const us = (q) => (samples[Math.floor(q * (samples.length - 1))] * 1000).toFixed(1);
  console.log(`TCP loopback ping-pong, two Node processes: p50 ${us(0.5)} us, p10 ${us(0.1)}, p90 ${us(0.9)}`);
  socket.destroy();
  child.stdin.end();
  if (sink === 0n || Number.isNaN(sum)) console.log('');  // keeps the loops from being optimized away
}
